# One entry point for people and CI. Every target (re)builds the virtual environment when the
# lock file or pyproject.toml changed, so a bare machine with Python 3.11, pip and make is enough.
PYTHON ?= python3
VENV   ?= .venv
CORES  ?= 2
CONFIG ?= config/default.yaml
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.spica-installed
# The documentation site's tools live in their own environment, so they never change the tested lock.
DOCS_VENV  ?= .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.spica-docs-installed

.PHONY: venv run test lock dry-run docs docs-lock clean-venv

venv: $(STAMP)

$(STAMP): requirements/lock.txt requirements/tools.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Spica needs Python 3.11, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/tools.txt
	# --no-deps: the lock is complete; resolving again would chase ai-dynamo's broken aisimulate pin.
	# --compile-bytecode: these machines set PYTHONDONTWRITEBYTECODE, so without it every fresh process
	# (each Snakemake job) compiles Dynamo, aiconfigurator, pandas and the rest again.
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --compile-bytecode -r requirements/lock.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --editable .
	touch $(STAMP)

## Run the embedded default sweep (results under results/<run>/).
run: $(STAMP)
	$(BIN)/spica run $(CONFIG) --cores $(CORES)

## Show what a run would do, without running it.
dry-run: $(STAMP)
	$(BIN)/spica run $(CONFIG) --cores $(CORES) -n

## Run the test suite.
test: $(STAMP)
	$(BIN)/python -m pytest

## Re-resolve requirements/lock.txt from pyproject.toml (needs network to PyPI).
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 --override requirements/overrides.txt \
	    --no-header --no-annotate --output-file requirements/lock.txt

## Build the documentation site into site/: the config reference generated from the models first (the page is
## committed, so links to it work on the forge; tests/test_cli.py fails while it is stale), then
## mkdocs --strict, so a broken link, anchor or missing page fails.
docs: $(STAMP) $(DOCS_STAMP)
	mkdir -p docs/reference
	$(BIN)/spica schema --markdown > docs/reference/config.md.tmp
	mv docs/reference/config.md.tmp docs/reference/config.md
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

$(DOCS_STAMP): requirements/docs.txt | $(STAMP)
	$(PYTHON) -m venv $(DOCS_VENV)
	$(BIN)/uv pip install --quiet --python $(DOCS_VENV)/bin/python --no-deps -r requirements/docs.txt
	touch $(DOCS_STAMP)

## Re-resolve requirements/docs.txt from pyproject.toml's docs extra (needs network to PyPI).
docs-lock: $(STAMP)
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' \
	    | $(BIN)/uv pip compile - --python-version 3.11 --no-header --no-annotate --output-file requirements/docs.txt

clean-venv:
	rm -rf $(VENV) $(DOCS_VENV)
