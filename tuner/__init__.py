"""tuner: an automated tuner for vLLM serving parameters.

The packages follow the stages of the data flow; each imports only from the layers below its
own. Their layers are `[tool.importlinter]` in pyproject.toml (`lint-imports` holds them), and
what each package does, one line each, is docs/architecture.md, "The packages"
(`tests/test_module_lists.py` keeps those lines and the packages in step). By name: `cli`,
`commands`, `engine`, `errors`, `fidelity`, `measure`, `results`, `run`, `runners`,
`scaffold`, `sim`, `spec`, `store`, `tls`, `tools` (outside the layers), `trial`, `verify`,
`workload`.
"""

__version__ = "0.1.0"
