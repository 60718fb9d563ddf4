# Two entry points (see README): `make serve` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV   ?= .venv
GROUPS ?= --group test --group lint
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve test fuzz check proto bench clean

# Under a lock, so `make serve` and `make test` started together build the venv once.
$(STAMP): pyproject.toml
	$(PYTHON) tools/setup_venv.py $(VENV) $(GROUPS)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/fnserve serve functions/

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# A longer fuzz campaign than the one `make test` runs (random seed; see benchmarks/fuzz.sh).
fuzz: $(STAMP)
	PYTHON=$(BIN)/python benchmarks/fuzz.sh

check: $(STAMP)
	$(BIN)/ruff format --check runtime functions tests benchmarks examples
	$(BIN)/ruff check runtime functions tests benchmarks examples
	$(BIN)/mypy

proto: $(STAMP)
	$(BIN)/python -m pip install -q --group proto
	$(BIN)/python tools/generate_protos.py

clean:
	rm -rf $(VENV) $(VENV).lock .pytest_cache .mypy_cache .ruff_cache .hypothesis
