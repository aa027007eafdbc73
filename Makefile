# Two entry points for a fresh machine with Python >= 3.11 and pip:
#   make run    executes the Santa Fe Bar notebook through papermill (CPU) into runs/
#   make test   runs the test suite
#   make book   builds the course book (the notebooks executed, as HTML) into build/book/html
# Each creates .venv on first use and installs what it needs there (pip's progress shown):
# make run the runtime of the notebook (mfgwork[run]), make test and make book everything
# (mfgwork[all,test], mfgwork[all]). A stamp per set (.venv/.installed-SET) is kept and
# redone when pyproject.toml changes; a larger set also stamps the sets it contains.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: run test lint bench doctor lab book

LAB_PORT ?= 8888
# pytest-xdist processes for make test (the CI machine has two cores), each with one OpenMP
# thread (torch's default, one per core in every worker, oversubscribes the cores: measured
# 44 s against 4 s for a test of the emulated MPS path on a loaded two-core box)
TEST_WORKERS ?= 2
TEST_THREADS ?= 1

comma := ,
# $(call install,EXTRAS,WHAT IT TAKES,OTHER SETS IT CONTAINS)
define install
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing mfgwork[$(1)] into $(VENV) (first run only: $(2))"
	$(PY) -m pip install --disable-pip-version-check -e ".[$(1)]"
	@touch $@ $(foreach s,$(3),$(VENV)/.installed-$(s))
endef

$(VENV)/.installed-run: pyproject.toml
	$(call install,run,about 660 MB$(comma) 1-2 min)
$(VENV)/.installed-all: pyproject.toml
	$(call install,all,PyTorch$(comma) JupyterLab$(comma) Sphinx$(comma) Dask...: about 3 GB$(comma) several minutes,run)
$(VENV)/.installed-test: pyproject.toml
	$(call install,all$(comma)test,everything and the test tools: about 3 GB$(comma) several minutes,run all)

run: $(VENV)/.installed-run
	$(PY) -m mfgwork run notebooks/01_santa_fe_bar.ipynb -o runs/santa_fe_bar

# the notebooks executed at their defaults by papermill, rendered by Sphinx + myst-nb with the
# user guide, the API reference and the performance page; open build/book/html/index.html
# (MathJax is bundled: no network needed). Executions are cached in build/book-cache by their
# inputs (notebook, parameters, the package's code): a rebuild runs only changed notebooks
# (BOOK_ARGS="--no-cache": all). BOOK_JOBS notebooks at a time (default 2, the two cores);
# BOOK_ARGS="--small": the small parameters of the tests. The build folder is replaced whole when
# the build succeeds; a folder that is not a book is refused (BOOK_ARGS="--force").
BOOK_JOBS ?= 2
book: $(VENV)/.installed-all
	$(PY) docs/book/build.py -o build/book -j $(BOOK_JOBS) $(BOOK_ARGS)

test: $(VENV)/.installed-test
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -n $(TEST_WORKERS)

lint: $(VENV)/.installed-test
	$(PY) -m ruff check mfgwork tests benchmarks notebooks docs

doctor: $(VENV)/.installed-all
	$(PY) -m mfgwork doctor

bench: $(VENV)/.installed-run
	$(PY) benchmarks/fdm.py

# JupyterLab in notebooks/ on 127.0.0.1 (loopback only) with a fresh token (or $LAB_TOKEN), by
# python -m mfgwork lab: the token reaches the server through the environment, never the command
# line (which every local user can read), outranks the user's own Jupyter configuration, and is
# checked once the server listens: a request without it must be refused, or the server is
# stopped and make lab fails. One Ctrl-C stops it and its kernels. Another listening address
# only through LAB_IP (e.g. make lab LAB_IP=0.0.0.0, reachable from the network). As root
# (containers, CI) --allow-root is added, with a note: Jupyter refuses root otherwise.
# Extra server options: make lab LAB_ARGS="..." (not the address or the authentication).
LAB_IP ?= 127.0.0.1
lab: $(VENV)/.installed-all
	@root=""; \
	if [ "$$(id -u)" -eq 0 ]; then \
		root="--allow-root"; \
		echo "note: running as root, so JupyterLab starts with --allow-root (its kernels run as root too)"; \
	fi; \
	exec $(PY) -m mfgwork lab --root notebooks --ip "$(LAB_IP)" --port "$(LAB_PORT)" $$root -- $(LAB_ARGS)
