"""The types of a config's values: one parameter's value, a whole config, vLLM's flags by name.

A config is what Optuna stores as a trial's params; the flags are what a config and the study
file's fixed flags give vLLM (`tuner.spec.space`). Typed here, below every module that passes
them, so none of them says `Any` for a config.
"""

from collections.abc import Mapping

Scalar = str | int | float | bool  # one parameter's (or flag's) value
Params = Mapping[str, Scalar]  # one config: parameter name → its value, as Optuna stores it
Flags = Mapping[str, Scalar | None]  # vLLM flags by long name without dashes (None: not given)
