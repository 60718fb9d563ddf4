# Two entry points (see README): `make serve` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve test fuzz check proto bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=25.1"
	$(BIN)/python -m pip install -q -e . --group test --group lint
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/fnserve serve functions/

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# A longer fuzz campaign than the one `make test` runs (random seed; see benchmarks/fuzz.sh).
fuzz: $(STAMP)
	PYTHON=$(BIN)/python benchmarks/fuzz.sh

check: $(STAMP)
	$(BIN)/ruff format --check runtime functions tests benchmarks
	$(BIN)/ruff check runtime functions tests benchmarks
	$(BIN)/mypy

proto: $(STAMP)
	$(BIN)/python -m pip install -q --group proto
	$(BIN)/python -m fnserve.server.grpc.generate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
