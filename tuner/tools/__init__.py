"""Tools that prepare what studies and tests need; the Makefile and `tuner make-tiny-model` call
them, the study itself never does.

Modules:
- `tinymodel`: a tiny Qwen2-shaped model directory (config + trained tokenizer), offline;
- `vllm_env`: repairs of the vLLM CPU build's environment (`.venv-vllm`): dist-info, AMX.

What may be assumed: standard library only at import time (they also run under
`.venv-vllm`'s Python), and never the test helpers (an import-linter contract).
"""

from tuner.tools.tinymodel import make_tiny_model
from tuner.tools.vllm_env import fix_amx, fix_dist_info

__all__ = ["fix_amx", "fix_dist_info", "make_tiny_model"]
