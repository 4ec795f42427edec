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
	$(BIN)/python benchmarks/bench_score.py

# The tiny offline model is rebuilt when its builder changes; each `make train` starts a fresh run.
TINY := outputs/tiny-model
$(TINY)/config.json: $(STAMP) grpo_tools/tiny.py
	$(BIN)/python -m grpo_tools.tiny --out $(TINY)

train: $(TINY)/config.json
	rm -rf outputs/tiny-grpo
	$(BIN)/grpo-tools train --config recipes/tiny/grpo/cpu.yaml

clean:
	rm -rf $(VENV) outputs build *.egg-info .pytest_cache .ruff_cache
