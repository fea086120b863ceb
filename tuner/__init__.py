"""tuner: an automated tuner for vLLM serving parameters."""

__version__ = "0.1.0"
