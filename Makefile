# The two commands of the README. Each creates .venv when missing and installs memfit with all
# extras; torch is pinned to the CPU wheel (an unpinned torch pulls a multi-GB CUDA build).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.install-stamp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test install lint clean bench bench-peers

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH_PIN)"
	$(BIN)/python -m pip install -q "$(TORCH_PIN)" -e ".[all,dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/memfit demo

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider --doctest-modules src/memfit
	$(BIN)/python -m pytest -n 2 -q tests

bench: install
	$(BIN)/python bench/run_all.py

# memfit beside accelerate, fitcheck-llm, llm-analysis, DeepSpeed and torch's MemTracker (bench/peers.py):
# each peer gets its own pinned venv under bench/.peers/ (they pin conflicting dependencies; none is a
# memfit dependency). Not part of `make test`: ~6 min to create the venvs once, then the run itself.
bench-peers: install
	$(BIN)/python bench/peers.py --install
	OMP_NUM_THREADS=2 $(BIN)/python bench/peers.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info bench/.peers
