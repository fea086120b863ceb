"""Start, watch, classify and stop an engine process (real vLLM or `tuner sim serve`)."""
