# Two entry points for a fresh machine with Python >= 3.11 and pip:
#   make run    executes the Santa Fe Bar notebook through papermill (CPU) into runs/
#   make test   runs the test suite
# Both create .venv on first use and reuse it afterwards (reinstalled when pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench doctor

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[all,test]"
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m mfgwork doctor

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check mfgwork tests benchmarks

doctor: $(STAMP)
	$(PY) -m mfgwork doctor

bench: $(STAMP)
	$(PY) benchmarks/fdm.py
