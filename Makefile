# `make demo` and `make test` bootstrap .venv from the package registry on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
CORPUS := ../shared/golden/reference-corpus.jsonl.gz
LINTED := src tests benchmarks examples tools

.PHONY: venv demo test lint typecheck unit corpus bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py
	$(PY) examples/agent_demo.py
	@echo "harmonia is installed in $(VENV): '. $(VENV)/bin/activate' puts it on PATH"

test: lint typecheck unit corpus

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

typecheck: $(STAMP)
	$(VENV)/bin/mypy src

# -rs: list every skipped test with its reason.
unit: $(STAMP)
	$(PY) -m pytest -rs $(PYTEST_ARGS)

# The reference corpus lives beside the repository (../shared); a plain clone
# without it still runs everything else. It runs once per BPE engine: the default
# (auto) and both of its tiers on their own, since auto may switch mid-run.
# tools/corpus_gate.py accepts exactly the deliberate deviations listed, with
# their reasons, in tests/data/corpus_deviations.json, and fails on any other.
corpus: $(STAMP)
	@if [ ! -f $(CORPUS) ]; then echo "corpus: $(CORPUS) not found, skipped"; exit 0; fi; \
	for engine in auto python quicktok; do \
		echo "corpus with HARMONIA_BPE_ENGINE=$$engine:"; \
		HARMONIA_BPE_ENGINE=$$engine $(PY) tools/corpus_gate.py \
			../shared/golden/check_corpus.py $(CORPUS) || exit 1; \
	done

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
