# Two commands do all the set-up on a fresh machine (Python 3.11+):
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

.PHONY: install install-dev run test floors lint bench fuzz docs docs-outputs dist dist-check clean

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

$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/python -m pip install -q --no-build-isolation -e '.[docs]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/decodekit generate "$(PROMPT)" $(ARGS)

# One worker per core (TEST_WORKERS=0: one process); tests that share a costly fixture stay in one worker.
TEST_WORKERS ?= auto
test: install-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The whole suite on the lowest versions the pyproject files admit (tests/floors.txt), in a venv of its own: ~4 GB
# of downloads (torch from PyPI is the CUDA build) and ~25 min on 2 cores, so by hand, not in CI.
FLOORS_VENV ?= build/floors-venv
floors:
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(FLOORS_VENV)/bin/python -m pip install -q -r tests/floors.txt
	sed 's/\[data\]//' tests/floors.txt > $(FLOORS_VENV)/constraints.txt  # pip takes no extras in a constraint
	$(FLOORS_VENV)/bin/python -m pip install -q -c $(FLOORS_VENV)/constraints.txt --no-build-isolation \
		-e . $(addprefix -e ,$(PLUGINS))
	$(FLOORS_VENV)/bin/python -m pip check
	$(FLOORS_VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

# mypy checks everything, tests included, in one run. Each directory is a base its files are imported from;
# each plugin's tests are a package of their own (build/mypy-tests/decodekit_beam_tests links to
# plugins/decodekit-beam/tests, and mypy names their files there): they share module names (conftest, test_cli)
# that pytest imports by path.
MYPY_TESTS := build/mypy-tests
MYPY_PATH := core $(addsuffix /src,$(PLUGINS)) examples benchmarks tests $(MYPY_TESTS)
lint: install-dev
	$(BIN)/ruff check core plugins tests examples benchmarks conftest.py
	$(BIN)/ruff format --check core plugins tests examples benchmarks conftest.py
	rm -rf $(MYPY_TESTS) && mkdir -p $(MYPY_TESTS)
	for t in plugins/*/tests; do p=$${t%/tests}; ln -s ../../$$t $(MYPY_TESTS)/$$(echo $${p#plugins/} | tr - _)_tests; done
	ln -s ../../conftest.py $(MYPY_TESTS)/repository_conftest.py  # beside tests/conftest.py: a module name of its own
	MYPYPATH=$$(echo $(MYPY_PATH) | tr ' ' :) $(BIN)/mypy --explicit-package-bases $(MYPY_PATH)

bench: install-dev
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_chain.py
	$(BIN)/python benchmarks/bench_catalogue.py
	$(BIN)/python benchmarks/bench_step_anatomy.py

# 10,000+ fuzz cases, every outcome counted (docs/reliability.md); FUZZ_ARGS="--cases 30000 --examples".
FUZZ_ARGS ?= --cases 10000 --seed 0
fuzz: install-dev
	nice $(BIN)/python benchmarks/fuzz.py $(FUZZ_ARGS)

# The docs site into site/; --strict: a broken link or API reference fails the build (anchors: tests/test_docs.py).
# Not --quiet: it hides the warnings from --strict too, which then passes them.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Rerun every `$$ decodekit ...` command shown in README.md and docs/ and write what it prints.
docs-outputs: install-dev
	$(BIN)/python tests/doc_examples.py --update

# A wheel and an sdist of the core and of each plugin, into dist/.
dist: $(BIN)/python
	$(BIN)/python -m pip install -q build==1.6.1
	rm -rf dist
	for p in . $(PLUGINS); do $(BIN)/python -m build -q --no-isolation --outdir dist $$p >/dev/null || exit 1; done

# The wheels in a fresh venv (not editable, not from the tree): torch and the core wheel first, which must bring
# exactly torch, pluggy, pydantic, typing-extensions and their dependencies; then every wheel beside them and a
# smoke test from elsewhere. One venv, so torch is installed once (a second venv for the core cost a torch install).
dist-check: dist
	rm -rf build/dist-venv
	$(PYTHON) -m venv build/dist-venv
	build/dist-venv/bin/python -m pip install -q $(TORCH)
	build/dist-venv/bin/python -m pip install -q dist/decodekit-*.whl
	build/dist-venv/bin/python tests/core_deps.py
	build/dist-venv/bin/python -m pip install -q dist/*.whl
	cd build && dist-venv/bin/python ../tests/wheel_smoke.py ../dist

clean:
	rm -rf $(VENV) build dist site core/*.egg-info plugins/*/src/*.egg-info
