# verispec — the two commands a newcomer runs: `make demo` and `make test`.
# Both are idempotent: they build .venv from a fresh machine if needed, then run.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
MODELS := $(VENV)/.models-stamp
ORACLE := $(VENV)/.oracle-stamp

.PHONY: demo test setup models lint typecheck pytest clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The test-only oracle (torch CPU + transformers): `make test` needs it, `make demo` does not. It installs
# the dev extra in the same pip run and stamps both: a second run would resolve and rebuild everything again.
# --no-compile: pip would compile all of torch and transformers (~30 s); the tests compile, once, the modules
# they import (the pytest target caches bytecode).
$(ORACLE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[dev,oracle]'
	touch $(STAMP) $(ORACLE)

models: $(MODELS)

$(MODELS): $(STAMP) verispec/registry.py
	$(VENV)/bin/verispec models fetch smollm2-135m
	$(VENV)/bin/verispec models fetch gemma3-270m
	touch $(MODELS)

# The main job on the default model, in the default (fastest lossless) mode: plain decoding,
# lossless speculative decoding (the default draft, auto: every lookup proposer merged into token
# trees, kept by measured acceptance) and llama.cpp plain (when the `llama` extra is installed) side
# by side, measured in one run on the same prompt and the same number of tokens; then the toy "station" whose exact law check shows what verification and
# repair buy. `verispec demo --exact` runs the float32 mode instead.
demo: $(STAMP)
	$(VENV)/bin/verispec models fetch smollm2-135m
	$(VENV)/bin/verispec tokenize --model smollm2-135m --pieces "Certified fast decoding keeps what the model says."
	$(VENV)/bin/verispec demo --model smollm2-135m --max-tokens 96
	$(VENV)/bin/verispec witness --steps 1000

# pytest-xdist: one worker per core, at most 4 and at most one per 3 GB of available memory (a worker loads
# models, ~2-3 GB). A third worker on 2 cores was faster with warm bytecode (9:01 against 9:16) but slower from a
# fresh clone (pytest 9:53 against 9:37: each worker compiles what it imports). One BLAS / torch / onnxruntime
# thread per worker: the workers already fill the cores. --dist loadgroup: tests one at a time, but a file with a module-scoped
# fixture (and each group of files sharing a session fixture's loads) whole to one worker, so a load happens once
# (tests/conftest.py: pytest_xdist_make_scheduler). WORKERS=0 runs in-process. The 25 slowest tests are listed at the
# end, so a run over the time target says where its time went.
# Bytecode is cached even where the environment sets PYTHONDONTWRITEBYTECODE: the tests start hundreds of
# Python processes (CLI runs, worker pools, both xdist workers), and without a cache each one compiles every
# module of verispec and of the tests (pytest's assertion rewriting) again.
WORKERS ?= $(shell $(PYTHON) -c 'import os, re; cores = len(os.sched_getaffinity(0)); kib = re.search(r"MemAvailable:\s+(\d+)", open("/proc/meminfo").read()); gib = int(kib.group(1)) / 2**20 if kib else 3.0; print(max(1, min(cores, 4, int(gib // 3))))')
pytest: models $(ORACLE)
	env -u PYTHONDONTWRITEBYTECODE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 VERISPEC_THREADS=1 $(PY) -m pytest -q -n $(WORKERS) --maxprocesses=4 --dist loadgroup --durations=25; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; exit $$rc

typecheck: $(STAMP)
	$(PY) -m mypy --strict

# The formatter and the linter (pyproject's [tool.ruff]: 120 columns); `ruff format .` fixes the first.
lint: $(STAMP)
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

# mypy runs beside pytest (its ~20 s of CPU fill the cores while the last tests finish); its output comes after
# pytest's, and either failing fails the target.
test: $(ORACLE) lint models
	@$(MAKE) --no-print-directory typecheck > $(VENV)/typecheck.log 2>&1 & typecheck=$$!; \
	$(MAKE) --no-print-directory pytest; tests=$$?; \
	wait $$typecheck; typed=$$?; cat $(VENV)/typecheck.log; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .hypothesis
