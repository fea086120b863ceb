"""tuner: an automated tuner for vLLM serving parameters.

The packages follow the stages of the data flow; each imports only from the layers below its own
(`lint-imports` holds them). What each package does, one line each, is docs/architecture.md,
"The modules" (`tests/test_module_lists.py` keeps those lines and the packages in step). The
layers, top to bottom, `a | b` for packages that share one:

    `cli` > `commands` > `verify` > `scaffold` > `results` | `run` > `fidelity` > `runners`
    > `store` > `trial` > `engine` | `workload` | `sim` > `measure` > `spec` > `errors` | `tls`

Outside the layers: `tools` (what the Makefile and `tuner make-tiny-model` call, never a study).
"""

__version__ = "0.1.0"
