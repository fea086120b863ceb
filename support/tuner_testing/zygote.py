"""An interpreter with its imports done, to fork the tests' commands from.

Most of the suite's end-to-end tests run the CLI to completion, hundreds of times; a fresh
`python -m tuner.cli` spends about 1.5 s of CPU importing optuna, sqlalchemy, pandas and
httpx, and a `run` or `plan` 1.3 s more importing transformers for the workload's tokenizer
(docs/performance.md, "The suite's time"). On the 2-core box that was a third of the suite.
The tests that run vLLM's own programs (`vllm bench serve`, `python -c` of its parser, its
defaults, its attention backends, its random prompts) paid ~10 s of CPU of imports each.

`python -P zygote.py PROFILE` imports one profile's modules once (`tuner`: the whole tuner,
in the tuner's environment; `vllm`: vLLM's CLI and benchmark modules, in vLLM's environment,
where this file is run by path: it imports nothing but the standard library until the
profile's preload), then forks one child per request read from its stdin (one JSON line: the
interpreter's argv after `python` — `-m MODULE ARGS`, `-c CODE ARGS` or `SCRIPT ARGS` —, cwd,
env, the files that become the child's stdin, stdout and stderr, and optionally the CPUs it
may run on, as `taskset -c`). The child is a process of its own (its own pid, cwd,
environment and file descriptors) that runs the command as the interpreter would (`runpy`
for `-m` and a script, `exec` in a fresh `__main__` for `-c`) and exits as it would: the
exit code of `SystemExit`, non-daemon threads joined, `atexit` run. The zygote answers the
child's pid at once and its exit code (`subprocess`'s convention: -N for signal N) when it
ends. What differs from a fresh process: the modules were imported before the command's
environment was set (its `PYTHONWARNINGS` is applied as the interpreter applies it at
start-up; the tuner reads no environment at import; `HF_HUB_OFFLINE` and
`TRANSFORMERS_VERBOSITY` are set as `tuner.workload.tokenizer.load_tokenizer` sets them; vLLM's
`envs` are read when used, and the preload ran under the tests' own environment), and
`/proc/<pid>/cmdline` names the zygote. Tests that need a real start (signals to a run in
the background, a console script as such, a vLLM server) start real processes instead.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import pkgutil
import runpy
import sys
import tempfile
import threading
import traceback
import warnings

# Every module a command may import, loaded once here: besides the tuner's own, what its
# commands import when first used (a forked `tuner run` on `tuner sim serve` still imported
# 420 modules, ~0.45 s of CPU: scipy's optimizer for the engine-speed fit, httpx's transport,
# typer's and rich's lazy parts, the Qwen2 tokenizer's classes, markdown for `--help`).
_PRELOAD = (
    "transformers",
    "tokenizers",
    "jinja2.sandbox",
    "scipy.optimize",
    "httpcore",
    "anyio._backends._asyncio",
    "typer._adapters",
    "typer.rich_utils",
    "rich._emoji_codes",
    "rich.markdown",
    "rich.traceback",
    "transformers.models.qwen2.configuration_qwen2",
    "transformers.models.qwen2.tokenization_qwen2",
)
# Not `tuner.cli`: each child runs it as `__main__`, as `-m` does, so it is never imported.
_SKIP = ("tuner_testing", "tuner.tools", "tuner.cli")
# What the tests run in vLLM's environment imports: its CLI (`vllm bench serve`, the `serve`
# parser), its benchmark datasets, its engine arguments and attention backends.
_VLLM_PRELOAD = (
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.benchmarks.serve",
    "vllm.benchmarks.datasets",
    "vllm.engine.arg_utils",
    "vllm.v1.attention.backends.registry",
    "transformers",
)


def _preload_tuner() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import tuner

    for info in pkgutil.walk_packages(tuner.__path__, "tuner."):
        if not info.name.startswith(_SKIP):
            importlib.import_module(info.name)
    assert "tuner.cli" not in sys.modules, "a module imports tuner.cli"
    for name in _PRELOAD:
        importlib.import_module(name)
    from transformers import AutoTokenizer  # noqa: F401 - resolves transformers' lazy modules

    _open_a_storage()


def _preload_vllm() -> None:
    for name in _VLLM_PRELOAD:
        importlib.import_module(name)
    from transformers import AutoTokenizer  # noqa: F401 - resolves transformers' lazy modules


_PROFILES = {"tuner": _preload_tuner, "vllm": _preload_vllm}


def _open_a_storage() -> None:
    """Open, write and close a throw-away SQLite study: Optuna loads its RDB storage's modules
    (SQLAlchemy's dialect and ORM, alembic for the schema check) lazily, at the first open,
    and that first open is ~1.3 s of CPU that every command reading a study would repeat."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created"
    with tempfile.TemporaryDirectory(prefix="zygote-") as tmp:
        storage = optuna.storages.RDBStorage(f"sqlite:///{tmp}/preload.db")
        study = optuna.create_study(storage=storage, study_name="preload")
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.0))
        study.trials  # noqa: B018 - the read path
        storage.engine.dispose()
    optuna.logging.set_verbosity(verbosity)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _run_as_python(argv: list[str]) -> None:
    """What `python ARGV` runs: `-m MODULE`, `-c CODE` or a script, with its `sys.argv`."""
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # argv[0]: the module's file, set by runpy
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        main = sys.modules["__main__"] = type(sys)("__main__")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def _warning_options(env: dict) -> None:
    """The command's `PYTHONWARNINGS`, applied as the interpreter applies it at start-up (its
    filters before the defaults; CPython's `warnings._processoptions`): the zygote's own
    start-up read the tests' environment, not the command's."""
    options = [o for o in env.get("PYTHONWARNINGS", "").split(",") if o]
    if options:
        sys.warnoptions.extend(options)
        warnings._processoptions(options)  # type: ignore[attr-defined]


def _child(request: dict, inherited: tuple[int, ...]) -> None:
    """Become the requested process; never returns."""
    code = 1
    try:
        for fd in inherited:  # as `subprocess`'s close_fds: only 0, 1 and 2 stay
            os.close(fd)
        if request.get("cpus"):
            os.sched_setaffinity(0, request["cpus"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _warning_options(request["env"])
        streams = ("stdin", os.O_RDONLY), ("stdout", os.O_WRONLY), ("stderr", os.O_WRONLY)
        for fd, (name, mode) in enumerate(streams):
            opened = os.open(request[name], mode)
            os.dup2(opened, fd)
            os.close(opened)
        try:
            _run_as_python(request["argv"])
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:  # what the interpreter prints for an uncaught exception
            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve(profile: str) -> None:
    """Preload `profile`, then read requests on stdin until it closes; answer `{"pid"}`
    then `{"returncode"}` for each."""
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)  # nothing the preload prints reaches the answers
    _PROFILES[profile]()
    # As a pre-fork server does: the preloaded objects move to a permanent generation, so a
    # child's collections (`run_benchmark` collects before it streams) do not walk them and
    # do not dirty their copy-on-write pages (gc.freeze's documentation).
    gc.collect()
    gc.freeze()
    inherited = (requests.fileno(), answers.fileno(), null)
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, inherited)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    # Its callers are gone: no teardown (the preloaded extensions' finalisers print leaks).
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    serve(sys.argv[1] if len(sys.argv) > 1 else "tuner")
