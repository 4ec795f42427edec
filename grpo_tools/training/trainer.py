"""`ToolGRPOTrainer`: trl's `GRPOTrainer` plus what our GRPO adds, each a short named piece.

trl does the rest (generation, rewards, group advantages, the clipped loss with its k3 KL, LoRA with the adapter
disabled as the reference, accelerate / DeepSpeed / FSDP). What this adds:
- adaptive KL (`_track_kl`): after each optimizer step, the step's measured KL (mean per-token k3 over completion
  tokens, reduced over all processes, so every process gets the same value) goes to `AdaptiveKLController`, and the
  coefficient it returns is the one the next step's loss uses (`self.beta`, which trl reads on every loss
  computation); it is logged as `kl_coef`, saved with every checkpoint (`kl_controller.json`) and restored on resume;
- the divergence guard: a non-finite loss or reward on any process stops the run on every process with
  `TrainingDivergedError` before anything more is saved, so the last checkpoint stays intact;
- tool metrics (`_log_tool_metrics`): with `environment_factory` (multi-turn tool use), `tools/calls_per_rollout`,
  `tools/turns`, `tools/failure_rate` and `tools/failures/<kind>` for each of `environments.FAILURE_KINDS`;
- `budget/<kind>`: completions past their budget (`grpo_tools.rewards.budget`) this step, summed over processes;
- gold turns (`gold_in_group`, `_with_gold`): the last completion of each group is the row's gold turn; with
  `gold_anchor`, its negative log-likelihood is added to the loss (`grpo_tools.training.anchor`);
- zero-variance filtering (`skip_zero_std_groups`, `_keep_informative`): the reference pass and the policy's forward
  and backward passes run only on groups whose rewards differ, as DAPO's dynamic sampling filters (Yu et al., 2025),
  without its resampling;
- `add_reward_func` (rewards weighted outside `reward_funcs`);
- the decision to call (`grpo_tools.training.decision`): advantages against the batch's or the class's mean
  (`advantage_baseline`), prompts drawn in a set share of no-call rows (`no_call_share`), and each step's shares of
  samples that call and that are right per class of row (`decision/...`).
On the CPU, sampling and log-probabilities go through `grpo_tools.fastpath` (`cpu_fast_path`); off, trl's own path
runs. trl's private names are reached through `trl_compat` alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from typing import Any

import torch

from grpo_tools import fastpath
from grpo_tools.rewards.budget import take_hit_counts
from grpo_tools.training.anchor import AnchorHooks
from grpo_tools.training.budget_args import step_budget_hits
from grpo_tools.training.configs import ConfigError
from grpo_tools.training.decision import DecisionHooks
from grpo_tools.training.kl import AdaptiveKLController
from grpo_tools.training.trl_compat import GRPOHooks, TurnInputs, check_trl_version
from grpo_tools.training.vllm_sync import check_vllm_policy, prepare_vllm_generation


__all__ = ["KL_STATE_FILE", "ToolGRPOTrainer", "TrainingDivergedError"]

logger = logging.getLogger(__name__)
KL_STATE_FILE = "kl_controller.json"

# Inputs of vision-language models, which are not one row per completion and so cannot be filtered by row.
_IMAGE_INPUTS = (
    "pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes", "image_position_ids",
    "num_images", "num_tiles",
)  # fmt: skip
# Trainer arguments that make rollouts multi-turn, where a gold turn has no place.
_MULTI_TURN_ARGUMENTS = ("environment_factory", "tools", "rollout_func")


class TrainingDivergedError(RuntimeError):
    """The loss or a reward became non-finite; training stopped without saving anything further."""


class ToolGRPOTrainer(AnchorHooks, DecisionHooks, GRPOHooks):
    """`trl.GRPOTrainer` whose KL coefficient adapts to hold the measured KL near `args.kl_target`.

    Takes the same arguments as `GRPOTrainer`; with a `ToolGRPOConfig` whose `adaptive_kl` is true (the default), the
    coefficient starts at `args.beta` and is updated after every optimizer step. With a plain `GRPOConfig`, or
    `adaptive_kl: false`, it behaves like `GRPOTrainer` plus the divergence guard (and the CPU fast path).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_trl_version()
        config = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        multi_turn = [name for name in _MULTI_TURN_ARGUMENTS if kwargs.get(name) is not None]
        if getattr(config, "gold_in_group", False) and multi_turn:
            raise ConfigError(f"gold_in_group needs single-turn rollouts; this trainer is given {multi_turn}")
        model = kwargs["model"] if "model" in kwargs else args[0]
        check_vllm_policy(model, kwargs.get("peft_config"), config)  # before minutes of loading and vLLM's start-up
        super().__init__(*args, **kwargs)
        prepare_vllm_generation(self)  # a LoRA model's weights reach vLLM merged into copies, its base left intact
        self._check_decision_data()
        take_hit_counts()  # budget hits counted before this trainer (an evaluation, another run) are not its steps'
        config = self.args
        self.cpu_fast_path = fastpath.enabled(getattr(config, "cpu_fast_path", "auto"), self.accelerator.device)
        if self.cpu_fast_path:
            for model in (self.model, self.ref_model):
                if model is not None:
                    fastpath.contiguous_head_input(model)  # the last positions' hidden states, as one matrix product
        # The reference (the adapter off) and the policy share the layers below the first adapted one.
        self.lower_layers = fastpath.shared_lower_layers(self) if self.cpu_fast_path else None
        self.kl_controller: AdaptiveKLController | None = None
        if getattr(config, "adaptive_kl", False):
            self.kl_controller = AdaptiveKLController(
                coef=config.beta,
                target=config.kl_target,
                rule=config.kl_controller,
                min_coef=config.kl_min,
                max_coef=config.kl_max,
                horizon=config.kl_horizon,
            )
        # KL x tokens, tokens and completions of the micro-batches since the last optimizer step, over all processes.
        self._step_kl = torch.zeros(3, dtype=torch.float64)
        # (step KL fed to the controller, coefficient it returned), one pair per optimizer step of this process.
        self.kl_history: list[tuple[float, float]] = []
        # Rewards of the last training batch, all processes (NaN where a function abstains), and weighted (NaN as 0).
        self._last_rewards: torch.Tensor | None = None
        self._last_weighted_rewards: torch.Tensor | None = None
        # With `gold_in_group`: the gold turn of each row of the batch being generated, in trl's order.
        self._gold_texts: list[str | None] | None = None

    # Loss: the divergence guard, adaptive KL.
    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        loss = super().policy_loss(model, inputs)
        losses = self.accelerator.gather(loss.detach().float().reshape(1))  # (processes,): all stop, or none waits
        if not torch.isfinite(losses).all():
            raise TrainingDivergedError(
                f"the loss is {losses[~torch.isfinite(losses)][0].item()} at step {self.state.global_step}; stopping "
                "before anything more is saved (the last checkpoint is intact). Lower the learning rate or raise beta."
            )
        if self.kl_controller is not None and self.model.training:
            self._track_kl(inputs)
        return loss

    def _track_kl(self, inputs: dict[str, Any]) -> None:
        """Accumulate this micro-batch's KL; at the optimizer-step boundary, update the coefficient."""
        # trl just appended this micro-batch's KL: its token-weighted mean over all processes' completion tokens.
        kl = self.step_metrics["kl"][-1]
        mask = (
            inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        )
        local = torch.stack([mask.sum().float(), torch.tensor(float(mask.size(0)), device=mask.device)])  # (2,)
        tokens, completions = self.accelerator.reduce(local, reduction="sum").tolist()
        self._step_kl += torch.tensor([kl * tokens, tokens, completions], dtype=torch.float64)
        # The last micro-batch of an accumulation cycle: the optimizer steps right after this loss (as trl's own
        # entropy controller reads it).
        if self.accelerator.sync_gradients:
            kl_sum, token_count, completion_count = self._step_kl.tolist()
            step_kl = kl_sum / max(token_count, 1.0)
            self.step_metrics["kl_coef"].append(self.beta)  # the coefficient this step's loss used
            self.beta = self.kl_controller.update(step_kl, int(completion_count))
            self.kl_history.append((step_kl, self.beta))
            self._step_kl.zero_()

    def save_extra_state(self, folder: str) -> None:
        if self.kl_controller is not None:
            with open(os.path.join(folder, KL_STATE_FILE), "w") as handle:
                json.dump(self.kl_controller.state_dict(), handle, indent=2)

    def load_extra_state(self, folder: str) -> None:
        """The KL coefficient in force at the checkpoint, restored before the first resumed step."""
        if self.kl_controller is None:
            return
        state_file = os.path.join(folder, KL_STATE_FILE)
        if not os.path.isfile(state_file):
            logger.warning("%s has no %s; the KL coefficient restarts at beta=%s", folder, KL_STATE_FILE, self.beta)
            return
        with open(state_file) as handle:
            self.kl_controller.load_state_dict(json.load(handle))
        self.beta = self.kl_controller.coef
        logger.info("restored the KL coefficient %.6g from %s", self.beta, state_file)

    # Rewards: extra weighted functions, tool metrics, the divergence guard.
    def add_reward_func(self, function: Any, weight: float) -> None:
        """Add a reward function with its weight after construction, the way trl adds an environment's `get_reward`;
        logged under the function's name. Call it before `train`."""
        from trl.trainer.utils import get_callable_name

        self.reward_funcs.append(function)
        self.reward_func_names.append(get_callable_name(function))
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat([self.reward_weights, torch.tensor([weight], dtype=torch.float32)])

    def _log_tool_metrics(self, completions: Any) -> None:
        """Calls, turns and failures by kind of this batch's rollouts, over all processes, into the step's metrics."""
        from grpo_tools.tools.environments import FAILURE_KINDS
        from grpo_tools.tools.trajectories import rollout_stats

        stats = [
            rollout_stats(environment, completion)
            for environment, completion in zip(self.environments, completions, strict=True)
        ]
        local = torch.tensor(
            [[item.calls, item.turns, *(item.failures[kind] for kind in FAILURE_KINDS)] for item in stats],
            dtype=torch.float32,
            device=self.accelerator.device,
        )  # (B, 2 + kinds)
        counts = self.accelerator.gather(local)  # (B x processes, 2 + kinds)
        calls = counts[:, 0].sum().item()
        failures = counts[:, 2:].sum(dim=0)  # (kinds,)
        metrics = self.step_metrics
        metrics["tools/calls_per_rollout"].append(counts[:, 0].mean().item())
        metrics["tools/turns"].append(counts[:, 1].mean().item())
        metrics["tools/failure_rate"].append(failures.sum().item() / calls if calls else 0.0)
        for kind, count in zip(FAILURE_KINDS, failures.tolist(), strict=True):
            metrics[f"tools/failures/{kind}"].append(count / calls if calls else 0.0)

    def score_completions(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        if self.environments is not None:
            self._log_tool_metrics(completions)
        rewards = super().score_completions(inputs, prompts, completions, completion_ids_list)  # (B, num_funcs)
        for kind, count in step_budget_hits(self.accelerator).items():
            self.step_metrics[f"budget/{kind}"].append(count)
        # trl turns a reward function's None ("does not apply") into NaN; a row where every function abstains, or any
        # infinite reward, leaves no usable signal.
        if torch.isinf(rewards).any() or torch.isnan(rewards).all(dim=1).any():
            names = [getattr(func, "__name__", str(func)) for func in self.reward_funcs]
            raise TrainingDivergedError(
                f"non-finite rewards at step {self.state.global_step} (reward functions {names}); stopping before "
                "anything more is saved (the last checkpoint is intact)"
            )
        weights = self.reward_weights.to(rewards.device).unsqueeze(0)  # (1, num_funcs)
        self._last_rewards = rewards
        self._last_weighted_rewards = torch.nan_to_num(rewards, nan=0.0) * weights  # (B, num_funcs)
        if self.environments is None and all("answers" in row for row in inputs):
            self._log_decision(inputs, completions)
        return rewards

    # The batch: gold turns, the advantage's baseline, zero-variance filtering.
    def generate_and_score(self, inputs: Any) -> dict[str, Any]:
        gold = getattr(self.args, "gold_in_group", False)
        self._gold_texts = [row.get("gold_completion") for row in inputs] if gold else None
        if not (self.model.training and getattr(self.args, "skip_zero_std_groups", False)):
            output = super().generate_and_score(inputs)
            if gold and self.model.training:
                self._mark_gold_turns(output, self._gold_texts)
            baseline = getattr(self.args, "advantage_baseline", "group")
            if self.model.training and baseline != "group":
                output["advantages"] = self._advantages(inputs, baseline)  # (B,)
            return output
        # trl skips its reference pass when beta is 0: run it below, on the rows kept, instead of on every row.
        beta, self.beta = self.beta, 0.0
        try:
            output = super().generate_and_score(inputs)
        finally:
            self.beta = beta
        if gold:
            self._mark_gold_turns(output, self._gold_texts)
        output = self._keep_informative(output)
        if beta != 0.0:
            output["ref_per_token_logps"] = self._reference_logps(output)  # (B', T)
        return output

    def _keep_informative(self, output: dict[str, Any]) -> dict[str, Any]:
        """`output` restricted to this process's rows whose group's weighted rewards are not all equal; all of them
        where no group on this process has a signal (the loss is then the KL term alone) rather than an empty batch."""
        images = sorted(key for key in _IMAGE_INPUTS if key in output)
        if images:
            raise ConfigError(f"skip_zero_std_groups supports text-only models; this batch has {images}")
        local_rows = output["completion_mask"].size(0)
        rewards = self._last_weighted_rewards  # (B x processes, num_funcs), grouped by prompt
        grouped = rewards.view(-1, self.num_generations, rewards.size(1))  # (groups, G, num_funcs)
        spread = (grouped.amax(dim=1) - grouped.amin(dim=1)).amax(dim=1)  # (groups,)
        informative = (spread > 1e-6).repeat_interleave(self.num_generations)  # (B x processes,)
        start = self.accelerator.process_index * local_rows
        keep = informative[start : start + local_rows].to(self.accelerator.device)  # (B,)
        self.step_metrics["frac_completions_trained"].append(self.accelerator.gather(keep.float()).mean().item())
        if not keep.any():
            return output
        output = {
            key: value[keep] if isinstance(value, torch.Tensor) and value.ndim > 0 else value
            for key, value in output.items()
        }
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)  # (B', T)
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return output

    def _reference_logps(self, output: dict[str, Any]) -> torch.Tensor:
        """Per-token log-probabilities (B', T) of the kept completions under the reference model, computed as trl
        computes them in its batch step, which runs before the rewards that choose the rows kept."""
        from trl.models.utils import disable_gradient_checkpointing
        from trl.trainer.utils import use_adapter

        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)  # (B, P + T)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)  # (B, P + T)
        arguments = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "logits_to_keep": output["completion_ids"].size(1),
            "batch_size": self.args.per_device_train_batch_size,
            **{key: output[key] for key in ("token_type_ids", "mm_token_type_ids") if key in output},
        }
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if self.ref_model is not None:
                logps, _, _ = self.token_logps(self.ref_model, **arguments)  # (B, T)
            else:
                model = self.accelerator.unwrap_model(self.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    logps, _, _ = self.token_logps(self.model, **arguments)  # (B, T)
        return logps

    # Log-probabilities and generation: the CPU fast path where it applies, gold turns.
    def token_logps(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **inputs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """trl's log-probabilities; on the CPU fast path (text-only inputs, no MoE auxiliary loss, no fp32 LM head,
        logits that fit `MAX_CPU_LOGITS`), `fastpath.logprobs.per_token_logps`."""
        from grpo_tools.fastpath import logprobs

        vocab = getattr(self.model.config.get_text_config(), "vocab_size", None)
        if not (
            self.cpu_fast_path
            and input_ids.device.type == "cpu"
            and not compute_aux_loss
            and all(value is None for value in inputs.values())
            and not self.args.cast_lm_head_to_fp32
            and logprobs.fits(input_ids.size(0), logits_to_keep, vocab)
        ):
            result = super().token_logps(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **inputs,
            )
            self._keep_policy_logps(result[0])
            return result
        logps, entropies = logprobs.per_token_logps(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=batch_size,
            temperature=self.temperature,
            compute_entropy=compute_entropy,
            entropy_grad=self.entropy_bonus_enabled,
            share_prompts=not self.args.gradient_checkpointing,
            autocast=self.accelerator.autocast,
            lower_layers=self.lower_layers,
        )
        self._keep_policy_logps(logps)
        return logps, entropies, None

    def generate_turn(self, prompt_ids: list[list[int]], turn: TurnInputs) -> tuple[list[list[int]], Any]:
        """trl's generation; with `gold_in_group`, the last completion of each group is its row's gold turn (not
        sampled where `generate` runs; vLLM and continuous batching take the whole batch, and their samples there
        are dropped); on the CPU fast path with `generate` and text only, `fastpath.sampling` samples.

        Sampling runs in the weights' own dtype (trl calls `generate` outside accelerate's autocast), which is why
        `model_init_kwargs` loads a LoRA run's frozen weights in bf16 on a CPU with native bf16."""
        from grpo_tools.fastpath.sampling import prefill_once_per_prompt

        gold = self._gold_texts or []
        if not self.model.training or len(gold) != len(prompt_ids):
            gold = []
        sampled = range(len(prompt_ids))
        if gold and not self.generates_whole_batch:
            sampled = [index for index, slot in enumerate(self._gold_slots(gold, turn.num_generations)) if not slot]
        fast = self.cpu_fast_path and not (
            self.generates_whole_batch or turn.images is not None or turn.multimodal_fields or turn.has_tool_images
        )
        model = self.accelerator.unwrap_model(self.model_wrapped)
        with prefill_once_per_prompt(model) if fast else contextlib.nullcontext():
            samples, logprobs = super().generate_turn([prompt_ids[index] for index in sampled], turn)
        completion_ids: list[list[int]] = [[] for _ in prompt_ids]
        for index, sample in zip(sampled, samples, strict=True):
            completion_ids[index] = sample
        if gold:
            return self._with_gold(completion_ids, logprobs, gold, turn.num_generations)
        return completion_ids, logprobs

    def _with_gold(
        self, completion_ids: list[list[int]], logprobs: list[list[float]] | None, gold: list[str | None], groups: int
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """The last completion of each group (of `groups` rows) replaced by that row's gold turn, cut after its end
        of turn and to `max_completion_length`.

        With vLLM, `logprobs` are the sampling log-probabilities trl's importance-sampling correction compares with
        the policy's; the gold slot's would be those of the sample it replaced. It gets NaN, one per gold token, which
        trl neutralises (ratio 1, no correction, left out of its sampling metrics): the gold turn was not sampled."""
        completion_ids = list(completion_ids)
        logprobs = None if logprobs is None else list(logprobs)
        eos = set(self.eos_token_ids)
        for index in [index for index, slot in enumerate(self._gold_slots(gold, groups)) if slot]:
            ids = self.text_tokenizer(gold[index], add_special_tokens=False)["input_ids"]
            end = next((position for position, token in enumerate(ids) if token in eos), len(ids) - 1)
            completion_ids[index] = ids[: end + 1][: self.max_completion_length]
            if logprobs is not None:
                logprobs[index] = [math.nan] * len(completion_ids[index])
        return completion_ids, logprobs

    def _gold_slots(self, gold: list[str | None], num_generations: int) -> list[bool]:
        """For each row of this process, whether it is its group's last and has a gold turn. trl gives process p the
        p-th slice of the batch of all processes, so a group can span two: the position that counts is the global one."""
        start, last = self.accelerator.process_index * len(gold), num_generations - 1
        return [(start + index) % num_generations == last and text is not None for index, text in enumerate(gold)]
