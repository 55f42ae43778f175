# gnndist: two commands.
#   make demo   set up .venv (torch only if none importable) and run the main job on bundled Cora
#   make test   same set-up, then ruff (make lint), then the test suite (tests/test_docs_site.py builds the site)
#   make docs   the documentation site, mkdocs build --strict into build/site (mkdocs.yml; mkdocs serve to browse)
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.gnndist-installed

.PHONY: demo test docs setup lint clean system-metis

$(VPY):
	$(PY) -m venv $(VENV)

# --no-compile: Python compiles a module when it is first imported (the suite's first import writes __pycache__),
# not every file of torch and the rest at install: 26 + 57 s -> 8 + 40 s for torch and .[dev] (2026-12-07, 2 cores)
# the venv's own pip where it installs editable from pyproject.toml (>= 21.3; upgrading it anyway cost 2 s)
$(STAMP): $(VPY) setup.cfg pyproject.toml
	$(VPY) -c "import pip, sys; sys.exit(tuple(map(int, pip.__version__.split('.')[:2])) < (21, 3))" \
		|| $(VPY) -m pip install -q --upgrade pip
	@if $(VPY) -c "import torch" 2>/dev/null; then \
		echo "torch already importable: $$($(VPY) -c 'import torch; print(torch.__version__)')"; \
	else \
		echo "installing $(TORCH) (CPU build on a CPU machine)"; \
		$(VPY) -m pip install -q --no-compile "$(TORCH)"; \
	fi
	$(VPY) -m pip install -q --no-compile -e ".[dev]"
	@# one process compiles what a run imports (else every process the suite starts first compiles it again)
	env -u PYTHONDONTWRITEBYTECODE $(VPY) -c "import torch, torch_geometric, scipy.sparse, gnndist.cli, gnndist.training.trainer"
	@touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/gnndist run cora --ranks 4

# the pytest console script, not `python -m pytest` (which puts the checkout's root on sys.path, where the
# folders partition/, kernels/, datasets/ import by bare names): the tests and every rank they start import
# gnndist as installed (tests/conftest.py refuses a run with the root on the path)
# on TEST_WORKERS processes (pytest-xdist), a test file to a worker (a file's module fixtures are built once);
# tests/conftest.py starts the longest files first (--no-loadscope-reorder: in that order, not by test count)
TEST_WORKERS ?= 2
test: setup lint
	$(VENV)/bin/pytest -q -x -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# a broken link, a page missing from the nav or an API name that no longer exists fails it (--strict)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# optional: Debian/Ubuntu's 32-bit-index METIS, half the partitioning memory of pymetis's build
system-metis:
	apt-get update -q && apt-get install -y -q libmetis5

# ruff.toml: pycodestyle (lines of at most 120 characters included), pyflakes, import order
lint: setup
	$(VENV)/bin/ruff check gnndist partition kernels datasets tests benchmarks examples scripts

clean:
	rm -rf $(VENV) build *.egg-info
