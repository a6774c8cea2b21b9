# Two commands do all the set-up on a fresh machine (Python 3.10+):
#   make run    creates .venv, installs the core and every plugin, generates from tiny-shakespeare
#   make test   installs the test tools too and runs the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PLUGINS := $(sort $(wildcard plugins/*))
# The CPU build of torch (a range would pull a multi-GB CUDA build).
TORCH  ?= torch==2.13.0
PROMPT ?= ROMEO:
ARGS   ?= --max-new-tokens 240 --seed 0

.PHONY: install install-dev run test lint bench fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS)) | $(BIN)/python
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q --no-build-isolation -e . $(addprefix -e ,$(PLUGINS))
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install -q --no-build-isolation -e '.[test,dev]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/decodekit generate "$(PROMPT)" $(ARGS)

test: install-dev
	$(BIN)/python -m pytest

lint: install-dev
	$(BIN)/ruff check core plugins tests examples benchmarks conftest.py
	$(BIN)/ruff format --check core plugins tests examples benchmarks conftest.py
	$(BIN)/mypy core/decodekit $(addsuffix /src,$(PLUGINS)) examples benchmarks tests/test_fuzz.py

bench: install-dev
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_chain.py
	$(BIN)/python benchmarks/bench_catalogue.py
	$(BIN)/python benchmarks/bench_step_anatomy.py

# 10,000+ fuzz cases, every outcome counted (docs/reliability.md); FUZZ_ARGS="--cases 30000 --examples".
FUZZ_ARGS ?= --cases 10000 --seed 0
fuzz: install-dev
	nice $(BIN)/python benchmarks/fuzz.py $(FUZZ_ARGS)

clean:
	rm -rf $(VENV) build core/*.egg-info plugins/*/src/*.egg-info
