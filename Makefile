# grpo-tools: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-slow quality style bench train clean

install: $(STAMP)

# torch first, pinned to the CPU build the machine offers, so that nothing later pulls CUDA wheels.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

quality: $(STAMP)
	$(BIN)/ruff check grpo_tools tests benchmarks
	$(BIN)/ruff format --check grpo_tools tests benchmarks

style: $(STAMP)
	$(BIN)/ruff check --fix grpo_tools tests benchmarks
	$(BIN)/ruff format grpo_tools tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_rewards.py

train: $(STAMP)
	$(BIN)/grpo-tools train

clean:
	rm -rf $(VENV) outputs build *.egg-info .pytest_cache .ruff_cache
