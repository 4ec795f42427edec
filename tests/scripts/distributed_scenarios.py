"""Run by tests/training/test_distributed.py under `torchrun --nproc_per_node 2`: short training scenarios, one after
another in the same two processes (one launch, since starting the processes costs more than the scenarios), each
writing what it saw to OUT/<scenario>.rank<N>.json. A scenario that raises records the error and the next one runs.

Usage: distributed_scenarios.py MODEL_DIR TRAIN_JSONL EVAL_JSONL OUT [SCENARIO ...]   (all of SCENARIOS by default)
"""

import functools
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import yaml
from accelerate import PartialState
from peft import LoraConfig
from transformers import AutoTokenizer, TrainerCallback

from grpo_tools.data.prompts import load_rows, prompt_dataset
from grpo_tools.evaluation.generation import generate_completions, generate_completions_shared
from grpo_tools.training.configs import ToolGRPOConfig
from grpo_tools.training.trainer import ToolGRPOTrainer


def letter_reward(completions, **kwargs):
    return [float(text.count("e")) for text in completions]


class RecordingTrainer(ToolGRPOTrainer):
    """Records, for every generation, which completions are their row's gold turn, and the KL coefficient restored
    on resume; with `nan_advantages_at`, rank 1 alone gets NaN advantages at that step (so its loss alone is NaN)."""

    nan_advantages_at: int | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gold_turns: list[dict] = []
        self.restored_beta: float | None = None

    def generate_turn(self, prompt_ids, turn):
        completion_ids, logprobs = super().generate_turn(prompt_ids, turn)
        gold = self._gold_texts or []
        if self.model.training and len(gold) == len(prompt_ids):
            self.gold_turns.append({
                "has_gold": [text is not None for text in gold],
                # A sample equal to the gold turn (up to its end of turn or the length limit) is all but impossible.
                "is_gold": [text is not None and sample == self._gold_ids(text)
                            for sample, text in zip(completion_ids, gold, strict=True)],
            })  # fmt: skip
        return completion_ids, logprobs

    def _gold_ids(self, text):
        ids = self.processing_class(text, add_special_tokens=False)["input_ids"]
        end = next((position for position, token in enumerate(ids) if token in set(self.eos_token_ids)), len(ids) - 1)
        return ids[: end + 1][: self.max_completion_length]

    def generate_and_score(self, inputs):
        output = super().generate_and_score(inputs)
        if self.accelerator.process_index == 1 and self.state.global_step == self.nan_advantages_at:
            output["advantages"] = output["advantages"] * math.nan
        return output

    def load_extra_state(self, folder):
        super().load_extra_state(folder)
        self.restored_beta = self.beta


def trainer(model_dir, train_path, out, rewards=(letter_reward,), **overrides):
    """A `RecordingTrainer` on the tiny model, its results written to OUT/<name>.rank<N>.json."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    settings = {
        "output_dir": out, "use_cpu": True, "per_device_train_batch_size": 4, "num_generations": 4,
        "max_completion_length": 8, "max_steps": 3, "learning_rate": 2e-2, "logging_steps": 1, "report_to": [],
        "save_strategy": "no", "gradient_checkpointing": False, "disable_tqdm": True, "seed": 0, "beta": 0.01,
        "kl_target": 0.001, "bf16": False,
    }  # fmt: skip
    args = ToolGRPOConfig(**{**settings, **overrides})
    return RecordingTrainer(
        model=model_dir, reward_funcs=list(rewards), args=args, processing_class=tokenizer,
        train_dataset=prompt_dataset(load_rows(train_path), tokenizer, with_gold=args.gold_in_group),
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
    )  # fmt: skip


def trained(grpo, resume=None):
    grpo.train(resume_from_checkpoint=resume)
    return {
        "kl_history": grpo.kl_history,
        "global_step": grpo.state.global_step,
        "gold_turns": grpo.gold_turns,
        "restored_beta": grpo.restored_beta,
        "world": grpo.accelerator.num_processes,
    }


def kl_accumulation_1(model_dir, train_path, eval_path, out):
    return trained(trainer(model_dir, train_path, f"{out}/acc1"))


def accumulation_2_gold(model_dir, train_path, eval_path, out):
    # 3 completions a micro-batch x 2 micro-batches = 6 a process, groups of 4: the middle group of every generation
    # batch spans the two processes (trl only asks that the 12 of both divide by 4).
    grpo = trainer(
        model_dir, train_path, f"{out}/acc2", per_device_train_batch_size=3, gradient_accumulation_steps=2, max_steps=2,
        gold_in_group=True, save_strategy="steps", save_steps=1,
    )  # fmt: skip
    return trained(grpo)


def resume_accumulation_2(model_dir, train_path, eval_path, out):
    grpo = trainer(
        model_dir, train_path, f"{out}/acc2", per_device_train_batch_size=3, gradient_accumulation_steps=2, max_steps=3,
        gold_in_group=True, save_strategy="steps", save_steps=1,
    )  # fmt: skip
    return trained(grpo, resume=f"{out}/acc2/checkpoint-2")


def _recipe(model_dir, train_path, eval_path, out, **overrides):
    recipe = {
        "model_name_or_path": model_dir, "dataset_name": train_path, "eval_data": eval_path, "eval_batch_size": 5,
        "use_peft": True, "lora_r": 8, "lora_alpha": 16, "lora_target_modules": "all-linear", "dtype": "float32",
        "warmup_sft_epochs": 1, "warmup_sft_peft": True, "warmup_sft_batch_size": 8, "warmup_sft_learning_rate": 3e-3,
        "reward_funcs": ["tool_format", "tool_partial"], "num_generations": 4, "per_device_train_batch_size": 4,
        "max_completion_length": 12, "learning_rate": 1e-2, "beta": 0.01, "kl_target": 0.001, "use_cpu": True,
        "bf16": False, "gradient_checkpointing": False, "output_dir": f"{out}/run", "logging_steps": 1,
        "save_steps": 1, "report_to": "none", "disable_tqdm": True, "seed": 0, **overrides,
    }  # fmt: skip
    path = Path(out, "recipe.yaml")
    if PartialState().is_local_main_process:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(recipe))
    PartialState().wait_for_everyone()
    return str(path)


class StepsTrained(TrainerCallback):
    """The global step after each optimizer step this process trains."""

    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def _watched_run(argv, out, delay_rank_1=0.0, run_dir="run"):
    """`grpo_tools.training.run.run` on the parsed recipe, recording which process writes into `run/warmup` (and
    making the main process's writes there slow, so that a process that does not wait for them reads too early), the
    prompts each process generates for the held-out evaluation, and the steps it trains."""
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from trl import TrlParser

    from grpo_tools.evaluation import generation
    from grpo_tools.training import run as run_module
    from grpo_tools.training import warm_start
    from grpo_tools.training.configs import ModelConfig, ToolScriptArguments

    state = PartialState()
    warm = os.path.realpath(f"{out}/{run_dir}/warmup")
    writes = []
    generated = []  # (description, prompts) of each call, on this process
    trained = StepsTrained()

    def recorded_generation(original):
        @functools.wraps(original)
        def generate_completions(model, tokenizer, prompts, *args, **kwargs):
            generated.append([kwargs.get("description", args[3] if len(args) > 3 else ""), list(prompts)])
            return original(model, tokenizer, prompts, *args, **kwargs)

        return generate_completions

    def with_callback(original):
        @functools.wraps(original)
        def build_trainer(*args, **kwargs):
            return original(*args, **{**kwargs, "callbacks": [trained]})

        return build_trainer

    def watched(original):
        @functools.wraps(original)
        def save_pretrained(self, save_directory, *args, **kwargs):
            if os.path.realpath(str(save_directory)).startswith(warm):
                writes.append([state.process_index, type(self).__name__])
                if state.is_main_process:
                    time.sleep(0.5)
            return original(self, save_directory, *args, **kwargs)

        return save_pretrained

    def delayed(original):
        @functools.wraps(original)
        def warm_started_model(*args, **kwargs):
            if state.process_index == 1:
                time.sleep(delay_rank_1)  # rank 0 has started its warm start by now
            return original(*args, **kwargs)

        return warm_started_model

    patched = [(PreTrainedModel, "save_pretrained"), (PeftModel, "save_pretrained"),
               (PreTrainedTokenizerBase, "save_pretrained")]  # fmt: skip
    originals = [getattr(owner, name) for owner, name in patched]
    modules = [(warm_start, "warm_started_model", delayed), (generation, "generate_completions", recorded_generation),
               (run_module, "build_trainer", with_callback)]  # fmt: skip
    module_originals = [getattr(module, name) for module, name, _ in modules]
    for (owner, name), original in zip(patched, originals, strict=True):
        setattr(owner, name, watched(original))
    for (module, name, wrap), original in zip(modules, module_originals, strict=True):
        setattr(module, name, wrap(original))
    try:
        parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig))
        script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
        reports = run_module.run(script_args, training_args, model_args, argv)
    finally:
        for (owner, name), original in zip(patched, originals, strict=True):
            setattr(owner, name, original)
        for (module, name, _), original in zip(modules, module_originals, strict=True):
            setattr(module, name, original)
    return {
        "warmup_writes": writes, "reports": reports, "world": state.num_processes, "generated": generated,
        "steps_trained": trained.steps,
    }  # fmt: skip


def warm_start_run(model_dir, train_path, eval_path, out):
    recipe = _recipe(model_dir, train_path, eval_path, out)
    return _watched_run(["--config", recipe, "--max_steps", "1"], out)


def warm_start_resume(model_dir, train_path, eval_path, out):
    # The warm start of the run resumed was cut short before its model was written: it is trained again, once.
    if PartialState().is_main_process:
        Path(out, "run", "warmup", "config.json").unlink()
    PartialState().wait_for_everyone()
    recipe = str(Path(out, "recipe.yaml"))
    argv = ["--config", recipe, "--max_steps", "2", "--resume_from_checkpoint", "true"]
    result = _watched_run(argv, out, delay_rank_1=2.0)
    PartialState().wait_for_everyone()  # the main process has written trainer_state.json
    result["global_step"] = json.loads(Path(out, "run", "trainer_state.json").read_text())["global_step"]
    return result


def nodes_on_own_disks(model_dir, train_path, eval_path, out):
    """Two nodes of one process each (`torchrun --nnodes 2`), each with a disk of its own: the same relative run
    folder is OUT/node<N>/run on node N."""
    node_out = f"{out}/node{os.environ['GROUP_RANK']}"
    recipe = _recipe(model_dir, train_path, eval_path, node_out, eval_data=None)
    return _watched_run(["--config", recipe, "--max_steps", "1"], node_out)


class EchoModel(torch.nn.Module):
    """Generates the last tokens of its prompt again: completions that differ from prompt to prompt."""

    device = torch.device("cpu")

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        return torch.cat([input_ids, input_ids[:, -max_new_tokens:]], dim=1)  # (B, P + new)


def shared_generation(model_dir, train_path, eval_path, out):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [f"row {index}: " + "abcdefghijklm"[: index + 1] for index in range(11)]  # 6 and 5: padded
    shared = generate_completions_shared(
        EchoModel(), tokenizer, prompts, batch_size=2, max_new_tokens=4, progress=False
    )
    alone = generate_completions(EchoModel(), tokenizer, prompts, batch_size=2, max_new_tokens=4, progress=False)
    return {"shared": shared, "alone": alone, "world": PartialState().num_processes}


def reward_diverges(model_dir, train_path, eval_path, out):
    rank = PartialState().process_index

    def infinite_on_rank_1(completions, trainer_state, **kwargs):
        value = math.inf if rank == 1 and trainer_state.global_step == 1 else 1.0
        return [value] * len(completions)

    return trained(trainer(model_dir, train_path, f"{out}/reward", rewards=(letter_reward, infinite_on_rank_1)))


def loss_diverges(model_dir, train_path, eval_path, out):
    grpo = trainer(model_dir, train_path, f"{out}/loss")
    grpo.nan_advantages_at = 1  # the second step, on rank 1 only
    return trained(grpo)


SCENARIOS = [
    shared_generation, kl_accumulation_1, accumulation_2_gold, resume_accumulation_2, warm_start_run, warm_start_resume,
    reward_diverges, loss_diverges,
]  # fmt: skip


# Run by name only, under `torchrun --nnodes 2 --nproc_per_node 1` (tests/training/test_nodes.py).
NODE_SCENARIOS = [nodes_on_own_disks]


def main(model_dir: str, train_path: str, eval_path: str, out: str, *names: str) -> None:
    state = PartialState(cpu=True)
    chosen = [scenario for scenario in SCENARIOS + NODE_SCENARIOS if scenario.__name__ in names]
    for scenario in chosen if names else SCENARIOS:
        started = time.monotonic()
        try:
            result = scenario(model_dir, train_path, eval_path, out)
        except Exception as error:  # recorded for the test to judge; the next scenario runs
            result = {"error": type(error).__name__, "message": str(error), "traceback": traceback.format_exc()}
        result["seconds"] = round(time.monotonic() - started, 1)
        Path(out, f"{scenario.__name__}.rank{state.process_index}.json").write_text(json.dumps(result, default=str))
        state.wait_for_everyone()
    # Both ranks have written their results: leave without tearing gloo down. On a loaded machine its threads aborted
    # ("terminate called without an active exception") or hung at interpreter exit, and so did destroy_process_group.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
