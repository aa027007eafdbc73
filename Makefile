# Two entry points for a fresh machine with Python >= 3.11 and pip:
#   make run    executes the Santa Fe Bar notebook through papermill (CPU) into runs/
#   make test   runs the test suite
#   make book   builds the course book (the notebooks executed, as HTML) into build/book/html
# Both create .venv on first use and reuse it afterwards (reinstalled when pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench doctor lab book

LAB_PORT ?= 8888
# pytest-xdist processes for make test (the CI machine has two cores)
TEST_WORKERS ?= 2

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[all,test]"
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m mfgwork run notebooks/01_santa_fe_bar.ipynb -o runs/santa_fe_bar

# the notebooks executed at their defaults by papermill, rendered by Sphinx + myst-nb; open
# build/book/html/index.html (MathJax is bundled: no network needed). BOOK_ARGS="-j 2": two
# notebooks at a time; BOOK_ARGS="--small": the small parameters of the tests.
book: $(STAMP)
	$(PY) docs/book/build.py -o build/book $(BOOK_ARGS)

test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS)

lint: $(STAMP)
	$(PY) -m ruff check mfgwork tests benchmarks notebooks docs

doctor: $(STAMP)
	$(PY) -m mfgwork doctor

bench: $(STAMP)
	$(PY) benchmarks/fdm.py

# JupyterLab on 127.0.0.1 in notebooks/ with a fresh token (or $LAB_TOKEN); one Ctrl-C stops it
# and its kernels. Extra server options: make lab LAB_ARGS="--allow-root".
lab: $(STAMP)
	@token=$${LAB_TOKEN:-$$($(PY) -c 'import secrets; print(secrets.token_hex(24))')}; \
	echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab?token=$$token  (Ctrl-C stops it)"; \
	exec $(PY) -m jupyter lab --no-browser --ServerApp.ip=127.0.0.1 \
		--ServerApp.port=$(LAB_PORT) --ServerApp.port_retries=0 \
		--IdentityProvider.token=$$token --ServerApp.root_dir=notebooks \
		--ServerApp.answer_yes=True $(LAB_ARGS)
