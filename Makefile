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
# notebooks at a time; BOOK_ARGS="--small": the small parameters of the tests. The build folder is
# replaced whole when the build succeeds; a folder that is not a book is refused (BOOK_ARGS="--force").
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

# JupyterLab in notebooks/ on 127.0.0.1 (loopback only) with a fresh token (or $LAB_TOKEN); one
# Ctrl-C stops it and its kernels. The token reaches the server through the environment
# (JUPYTER_TOKEN), never the command line, which every local user can read. Another listening
# address only through LAB_IP (e.g. make lab LAB_IP=0.0.0.0, reachable from the network).
# Extra server options: make lab LAB_ARGS="--allow-root" (not the address or the token).
LAB_IP ?= 127.0.0.1
lab: $(STAMP)
	@case " $(LAB_ARGS) " in *[.-]ip[=\ ]*|*token*) \
		echo "error: LAB_ARGS may not set the address or the token: use LAB_IP / LAB_TOKEN" >&2; \
		exit 2;; esac; \
	token=$${LAB_TOKEN:-$$($(PY) -c 'import secrets; print(secrets.token_hex(24))')}; \
	echo "JupyterLab: http://$(LAB_IP):$(LAB_PORT)/lab?token=$$token  (Ctrl-C stops it)"; \
	JUPYTER_TOKEN=$$token exec $(PY) -m jupyter lab --no-browser $(LAB_ARGS) \
		--ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) --ServerApp.port_retries=0 \
		--ServerApp.root_dir=notebooks --ServerApp.answer_yes=True
