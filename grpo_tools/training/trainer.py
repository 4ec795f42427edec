"""`ToolGRPOTrainer`: trl's `GRPOTrainer` with an adaptive KL coefficient and a guard against divergence.

trl does the rest (generation, rewards, group advantages, the clipped loss with its k3 KL, LoRA with the adapter
disabled as the reference, accelerate / DeepSpeed / FSDP). What this adds:
- after each optimizer step, the step's measured KL (mean per-token k3 over completion tokens, reduced over all
  processes, so every process gets the same value) goes to `AdaptiveKLController`, and the coefficient it returns is
  the one the next step's loss uses (`self.beta`, which trl reads on every loss computation);
- the coefficient in force is logged as `kl_coef` and saved with every checkpoint (`kl_controller.json`), and restored
  on `resume_from_checkpoint`;
- a non-finite loss or reward stops the run with `TrainingDivergedError` before anything more is saved, so the last
  checkpoint stays intact;
- with `environment_factory` (multi-turn tool use), per-step tool metrics read from each rollout's environment:
  `tools/calls_per_rollout`, `tools/turns` (assistant turns per rollout), `tools/failure_rate` (failed calls per
  call) and its parts by kind, `tools/failures/<kind>` for each of `environments.FAILURE_KINDS`;
- `add_reward_func`, for rewards weighted outside `reward_funcs` (the multi-turn outcome and extra-call cost);
- with `skip_zero_std_groups`, the reference pass and the policy's forward and backward passes run only on the
  completions of groups whose rewards differ: a group whose completions all score alike has advantage 0 everywhere,
  so it adds nothing to the policy gradient but its KL term, and on a small model those passes are most of a step's
  cost (the filter of DAPO's dynamic sampling, Yu et al., 2025, without its resampling);
- on the CPU, log-probabilities from the LM head over the completion positions only. trl's fused LM head projects
  every position, prompt included, whenever it cannot use its Triton kernels (fixed tile shapes keep compilers from
  recompiling); that was about a quarter of a SmolLM2 GRPO step on 2 cores (README, Performance). The completions of a
  group share their prompt's forward pass there too: prompts are most of the positions those passes read, and that
  saved about a third of what was left of a step. Generation with transformers' `generate` does the same: each
  distinct prompt is prefilled once and its cache copied to its group's rows, where `generate` prefills every row,
  and plain sampling runs in a loop of ours that drops each row at its end of turn (`_sample_rows`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch
import transformers
from packaging.version import Version
from transformers.cache_utils import DynamicLayer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from trl import GRPOTrainer

from grpo_tools.training.configs import ConfigError
from grpo_tools.training.kl import AdaptiveKLController


__all__ = ["KL_STATE_FILE", "ToolGRPOTrainer", "TrainingDivergedError"]

logger = logging.getLogger(__name__)
KL_STATE_FILE = "kl_controller.json"
# The most logits (rows x completion positions x vocabulary) the CPU path below materialises at once; above it, trl's
# fused LM head, which never holds them, runs instead. 2**28 float32 logits are 1 GiB, and the log-softmax kept for the
# backward pass as much again; a SmolLM2 step holds 16 x 65 x 49,152 (about 2**25.6).
MAX_CPU_LOGITS = 2**28

# The CPU path turns logits into log-probabilities and entropies a few rows at a time, each piece's float32 values at
# most this size: under the 32 MiB above which glibc maps every block afresh from the kernel even with
# `keep_freed_memory`, so the pieces reuse the same heap memory. Over a SmolLM2 step's whole batch, 32 x 64 x 49,152
# float32 values (400 MB) per tensor, the conversion to float32, the log-softmax, the entropy's product and their
# backward passes each went to fresh pages: on one CPU thread 3 GRPO steps took 69.2 s that way and 57.5 s a row at a
# time (README, Performance).
_LOGITS_PIECE_BYTES = 16 << 20

# The batch size oneDNN lays linear weights out for while sampling (`_packed`); the products' values do not depend
# on it.
_SAMPLING_ROWS = 32

# transformers 5.24 renamed the key/value cache, as an argument and as an output field, from `past_key_values` to
# `cache`; the old name still works there, with a warning. Earlier releases know only the old name.
_CACHE = "cache" if Version(transformers.__version__) >= Version("5.24.0.dev0") else "past_key_values"

# Inputs of vision-language models, which are not one row per completion and so cannot be filtered by row.
_IMAGE_INPUTS = (
    "pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes", "image_position_ids",
    "num_images", "num_tiles",
)  # fmt: skip


class TrainingDivergedError(RuntimeError):
    """The loss or a reward became non-finite; training stopped without saving anything further."""


class ToolGRPOTrainer(GRPOTrainer):
    """`trl.GRPOTrainer` whose KL coefficient adapts to hold the measured KL near `args.kl_target`.

    Takes the same arguments as `GRPOTrainer`; with a `ToolGRPOConfig` whose `adaptive_kl` is true (the default), the
    coefficient starts at `args.beta` and is updated after every optimizer step. With a plain `GRPOConfig`, or
    `adaptive_kl: false`, it behaves exactly like `GRPOTrainer` plus the divergence guard.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from grpo_tools.evaluation.generation import contiguous_head_input

        for model in (self.model, self.ref_model):
            if model is not None:
                contiguous_head_input(model)  # the hidden states of the last positions, as one matrix product
        config = self.args
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
        # Weighted rewards of the last training batch, all processes, for `skip_zero_std_groups`.
        self._last_weighted_rewards: torch.Tensor | None = None
        # With `gold_in_group`: the gold turn of each row of the batch being generated, in trl's order.
        self._gold_texts: list[str | None] | None = None

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        held = getattr(self.args, "kl_only_tokens", 0)
        if held > 0:
            # trl takes (B, T) advantages as they are; zero ones leave a token only its KL term.
            advantages = inputs["advantages"]
            if advantages.dim() == 1:
                advantages = advantages.unsqueeze(1).expand_as(inputs["completion_ids"])
            advantages = advantages.clone()
            advantages[:, :held] = 0.0
            inputs = {**inputs, "advantages": advantages}
        loss = super()._compute_loss(model, inputs)
        if not torch.isfinite(loss).all():
            raise TrainingDivergedError(
                f"the loss is {loss.item()} at step {self.state.global_step}; stopping before anything more is saved "
                "(the last checkpoint is intact). Lower the learning rate or raise beta."
            )
        if self.kl_controller is not None and self.model.training:
            self._track_kl(inputs)
        return loss

    def _track_kl(self, inputs: dict[str, Any]) -> None:
        """Accumulate this micro-batch's KL; at the optimizer-step boundary, update the coefficient."""
        # trl just appended this micro-batch's KL: its token-weighted mean over all processes' completion tokens.
        kl = self._metrics["train"]["kl"][-1]
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
            self._metrics["train"]["kl_coef"].append(self.beta)  # the coefficient this step's loss used
            self.beta = self.kl_controller.update(step_kl, int(completion_count))
            self.kl_history.append((step_kl, self.beta))
            self._step_kl.zero_()

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
        metrics = self._metrics["train" if self.model.training else "eval"]
        metrics["tools/calls_per_rollout"].append(counts[:, 0].mean().item())
        metrics["tools/turns"].append(counts[:, 1].mean().item())
        metrics["tools/failure_rate"].append(failures.sum().item() / calls if calls else 0.0)
        for kind, count in zip(FAILURE_KINDS, failures.tolist(), strict=True):
            metrics[f"tools/failures/{kind}"].append(count / calls if calls else 0.0)

    def _calculate_rewards(
        self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any
    ) -> torch.Tensor:
        if self.environments is not None:
            self._log_tool_metrics(completions)
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (B, num_funcs)
        # trl turns a reward function's None ("does not apply") into NaN; a row where every function abstains, or any
        # infinite reward, leaves no usable signal.
        if torch.isinf(rewards).any() or torch.isnan(rewards).all(dim=1).any():
            names = [getattr(func, "__name__", str(func)) for func in self.reward_funcs]
            raise TrainingDivergedError(
                f"non-finite rewards at step {self.state.global_step} (reward functions {names}); stopping before "
                "anything more is saved (the last checkpoint is intact)"
            )
        weights = self.reward_weights.to(rewards.device).unsqueeze(0)  # (1, num_funcs)
        self._last_weighted_rewards = torch.nan_to_num(rewards, nan=0.0) * weights  # (B, num_funcs)
        return rewards

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        gold = getattr(self.args, "gold_in_group", False)
        self._gold_texts = [row.get("gold_completion") for row in inputs] if gold else None
        if not (self.model.training and getattr(self.args, "skip_zero_std_groups", False)):
            return super()._generate_and_score_completions(inputs)
        # trl skips its reference pass when beta is 0: run it below, on the rows kept, instead of on every row.
        beta, self.beta = self.beta, 0.0
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self.beta = beta
        images = sorted(key for key in _IMAGE_INPUTS if key in output)
        if images:
            raise ConfigError(f"skip_zero_std_groups supports text-only models; this batch has {images}")
        keep = self._informative_rows(output["completion_mask"].size(0))  # (B,)
        self._metrics["train"]["frac_completions_trained"].append(self.accelerator.gather(keep.float()).mean().item())
        if keep.any():
            output = {
                key: value[keep] if isinstance(value, torch.Tensor) and value.ndim > 0 else value
                for key, value in output.items()
            }
            loss_mask = output["completion_mask"] * output.get("tool_mask", 1)  # (B', T)
            output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        # else no group on this process has a signal: train on all its rows (the loss is then the KL term alone)
        # rather than on an empty batch.
        if beta != 0.0:
            output["ref_per_token_logps"] = self._reference_logps(output)  # (B', T)
        return output

    def _reference_logps(self, output: dict[str, Any]) -> torch.Tensor:
        """Per-token log-probabilities of the completions under the reference model, as trl computes them in
        `_generate_and_score_completions` (a separate reference model, or the adapter disabled)."""
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
                logps, _, _ = self._get_per_token_logps_and_entropies(self.ref_model, **arguments)  # (B, T)
            else:
                model = self.accelerator.unwrap_model(self.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    logps, _, _ = self._get_per_token_logps_and_entropies(self.model, **arguments)  # (B, T)
        return logps

    def _get_per_token_logps_and_entropies(
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
        """Log-probabilities (and entropies) of the last `logits_to_keep` tokens of each row, as trl computes them.

        On the CPU, for text-only inputs, the model's own LM head runs on those positions alone. Elsewhere (Triton's
        fused kernels, images, MoE auxiliary losses, an fp32 LM head under autocast), and where the batch's logits would
        exceed `MAX_CPU_LOGITS` (this path holds them all until the backward pass; trl's never does), trl's
        computation runs.
        """
        extra = {key: value for key, value in inputs.items() if value is not None}
        vocab = getattr(self.model.config.get_text_config(), "vocab_size", None) or MAX_CPU_LOGITS + 1
        if (
            input_ids.device.type != "cpu"
            or compute_aux_loss
            or extra
            or self.args.cast_lm_head_to_fp32
            or input_ids.size(0) * (logits_to_keep + 1) * vocab > MAX_CPU_LOGITS
        ):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **inputs,
            )
        batch_size = batch_size or input_ids.size(0)
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]  # (b, L)
            with self.accelerator.autocast():
                blocks = self._completion_logits(model, ids, mask, logits_to_keep)  # [(b, k, V), ...]
            widths = [block.size(1) for block in blocks]
            targets = ids[:, -logits_to_keep:].split(widths, dim=1)  # (b, k) each
            # Padding positions score 0, as trl scores them.
            padding = (mask[:, -logits_to_keep:] == 0).split(widths, dim=1)  # (b, k) each
            scored = [
                self._score_logits(*block, compute_entropy) for block in zip(blocks, targets, padding, strict=True)
            ]
            all_logps.append(torch.cat([logps for logps, _ in scored], dim=1))  # (b, K)
            if compute_entropy:
                all_entropies.append(torch.cat([entropy for _, entropy in scored], dim=1))  # (b, K)
        entropies = torch.cat(all_entropies, dim=0) if compute_entropy else None
        return torch.cat(all_logps, dim=0), entropies, None

    def _score_logits(
        self, logits: torch.Tensor, targets: torch.Tensor, padding: torch.Tensor, compute_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The log-probabilities of `targets` (b, k) under `logits` (b, k, V) at the sampling temperature, and the
        entropies where asked, both (b, k) and 0 where `padding` is set.

        A few rows at a time (see `_LOGITS_PIECE_BYTES`); every operation here is row by row, so the values and
        gradients are those of the whole block at once. `split` (one autograd node) gives the backward pass one
        concatenation, where indexing would add a whole-block gradient per piece."""
        rows = max(1, _LOGITS_PIECE_BYTES // (4 * logits[0].numel()))
        all_logps, all_entropies = [], []
        for part, part_targets, part_padding in zip(
            logits.split(rows), targets.split(rows), padding.split(rows), strict=True
        ):
            logps = (part.float() / self.temperature).log_softmax(dim=-1)  # (r, k, V)
            gathered = logps.gather(-1, part_targets.unsqueeze(-1)).squeeze(-1)  # (r, k)
            all_logps.append(gathered.masked_fill(part_padding, 0.0))
            if compute_entropy:
                # Only trl's entropy bonus differentiates the entropy; without it, no graph keeps exp(logps) alive.
                with contextlib.nullcontext() if getattr(self, "_entropy_bonus_enabled", True) else torch.no_grad():
                    entropy = -(logps.exp() * logps).sum(dim=-1)  # (r, k)
                all_entropies.append(entropy.masked_fill(part_padding, 0.0))
        return torch.cat(all_logps), torch.cat(all_entropies) if compute_entropy else None

    def _completion_logits(
        self, model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, logits_to_keep: int
    ) -> list[torch.Tensor]:
        """The logits that predict the last `logits_to_keep` tokens of each row (position i predicts token i + 1), as
        consecutive blocks of those positions, (b, k, V) each: the first from the prompts' pass, the rest from the
        completions'. Joined, they would be copied once more forward and once more backward, 200 MB in bf16 for a
        SmolLM2 step.

        Rows that share a prompt (a GRPO group's completions) share its forward pass: each distinct prompt runs once,
        its key/value cache is copied to every row that has it, and the completions run on from there. Positions
        and the padding mask are the ones the single pass over the whole row uses, so the values are the same up to
        float rounding, and gradients reach the adapter through the shared cache. With gradient checkpointing (which
        turns the cache off), no shared prompt or a model that returns no cache, the whole rows run in one pass.
        """
        prompt_length = ids.size(1) - logits_to_keep
        cache = None
        if prompt_length > 0 and not self.args.gradient_checkpointing:
            prompt_rows = torch.cat([ids[:, :prompt_length], mask[:, :prompt_length]], dim=1)  # (b, 2P)
            distinct, row_prompt = torch.unique(prompt_rows, dim=0, return_inverse=True)  # (u, 2P), (b,)
            if distinct.size(0) < ids.size(0):
                prompt = model(
                    input_ids=distinct[:, :prompt_length],
                    attention_mask=distinct[:, prompt_length:],
                    use_cache=True,
                    logits_to_keep=1,
                )  # (u, 1, V): what each prompt's last token predicts, the first completion token
                cache = getattr(prompt, _CACHE)
        if cache is None:
            # The logits of the last K + 1 positions, less the final one.
            return [model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1).logits[:, :-1]]
        cache.batch_select_indices(row_prompt)
        blocks = [prompt.logits[row_prompt]]  # (b, 1, V)
        if logits_to_keep > 1:
            rest = model(
                input_ids=ids[:, prompt_length:-1],
                attention_mask=mask[:, :-1],
                use_cache=True,
                **{_CACHE: cache},
            ).logits  # (b, K - 1, V)
            blocks.append(rest)
        return blocks

    def _generate_single_turn(
        self,
        prompt_ids: list[list[int]],
        images: Any,
        multimodal_fields: dict[str, Any] | None,
        num_generations: int,
        has_tool_images: bool = False,
    ) -> tuple[list[list[int]], Any]:
        """trl's generation; on the CPU with transformers' `generate` and text only, each prompt prefilled once and
        plain sampling run by `_sample_rows`; with `gold_in_group`, the last completion of each group is its row's gold
        turn (not sampled, where `generate` runs).

        `generate` runs its prefill over every row, and a group's `num_generations` rows carry the same prompt: on
        one CPU thread that prefill was about a third of a SmolLM2 rollout (README, Performance). Here each distinct
        prompt (less its last token) runs once and its cache is copied to the rows that share it. Plain sampling
        (trl's defaults) then goes on in `_sample_rows`, which stops computing each row at its end of turn, merges
        LoRA and runs on weights laid out for oneDNN once (`_layers_for_sampling`); any other generation config goes
        on in `generate`, with its own positions and padding mask, so with the same seed its samples are the same
        tokens up to float rounding.

        Sampling runs in the weights' own dtype (trl calls `generate` outside accelerate's autocast): with bf16
        autocast around float32 weights, SmolLM2's GRPO steps took about 30% longer on a CPU with AMX, since each
        token's step recasts every weight for a few rows' worth of arithmetic; weights loaded in bf16
        (`model_init_kwargs`) sample about 20% faster than float32 ones (README, Performance).
        """
        plain = (
            self.use_vllm
            or self.use_transformers_continuous_batching
            or images is not None
            or multimodal_fields
            or has_tool_images
            or self.accelerator.device.type != "cpu"
        )
        model = self.accelerator.unwrap_model(self.model_wrapped)
        gold = self._gold_texts or []
        if not self.model.training or len(gold) != len(prompt_ids):
            gold = []
        # With transformers' `generate`, the rows a gold turn will replace are not sampled at all (a quarter of a
        # group of four); vLLM and continuous batching take the whole batch, and their samples there are dropped.
        sampled = range(len(prompt_ids))
        if gold and not (self.use_vllm or self.use_transformers_continuous_batching):
            sampled = [index for index in sampled if not _gold_slot(index, gold, num_generations)]
        with contextlib.nullcontext() if plain else _prefill_once_per_prompt(model):
            samples, logprobs = super()._generate_single_turn(
                [prompt_ids[index] for index in sampled], images, multimodal_fields, num_generations, has_tool_images
            )
        completion_ids: list[list[int]] = [[] for _ in prompt_ids]
        for index, sample in zip(sampled, samples, strict=True):
            completion_ids[index] = sample
        if gold:
            completion_ids = self._with_gold(completion_ids, gold, num_generations)
        return completion_ids, logprobs

    def _with_gold(
        self, completion_ids: list[list[int]], gold: list[str | None], num_generations: int
    ) -> list[list[int]]:
        """The last completion of each group replaced by that row's gold turn, cut after its end of turn and to
        `max_completion_length`."""
        completion_ids = list(completion_ids)
        eos = set(self.eos_token_ids)
        for index in range(len(completion_ids)):
            if not _gold_slot(index, gold, num_generations):
                continue
            ids = self._tokenizer(gold[index], add_special_tokens=False)["input_ids"]
            end = next((position for position, token in enumerate(ids) if token in eos), len(ids) - 1)
            completion_ids[index] = ids[: end + 1][: self.max_completion_length]
        return completion_ids

    def _informative_rows(self, local_rows: int) -> torch.Tensor:
        """This process's rows whose group's weighted rewards are not all equal, as a boolean mask."""
        rewards = self._last_weighted_rewards  # (B x processes, num_funcs), grouped by prompt
        grouped = rewards.view(-1, self.num_generations, rewards.size(1))  # (groups, G, num_funcs)
        spread = (grouped.amax(dim=1) - grouped.amin(dim=1)).amax(dim=1)  # (groups,)
        informative = (spread > 1e-6).repeat_interleave(self.num_generations)  # (B x processes,)
        start = self.accelerator.process_index * local_rows
        return informative[start : start + local_rows].to(self.accelerator.device)  # (B,)

    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        # Written first, so that any checkpoint complete enough to resume from holds the coefficient.
        if self.kl_controller is not None and self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, KL_STATE_FILE), "w") as handle:
                json.dump(self.kl_controller.state_dict(), handle, indent=2)
        super()._save_checkpoint(model, trial)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """Train; when resuming, the KL coefficient in force at the checkpoint is restored first."""
        if resume_from_checkpoint and self.kl_controller is not None:
            folder = resume_from_checkpoint
            if folder is True:
                folder = get_last_checkpoint(self.args.output_dir)
            state_file = os.path.join(folder, KL_STATE_FILE) if isinstance(folder, str) else None
            if state_file and os.path.isfile(state_file):
                with open(state_file) as handle:
                    self.kl_controller.load_state_dict(json.load(handle))
                self.beta = self.kl_controller.coef
                logger.info("restored the KL coefficient %.6g from %s", self.beta, state_file)
            elif state_file:
                logger.warning(
                    "%s has no %s; the KL coefficient restarts at beta=%s", folder, KL_STATE_FILE, self.beta
                )
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)


def _gold_slot(index: int, gold: list[str | None], num_generations: int) -> bool:
    """Whether completion `index` is its group's last and its row has a gold turn to put there."""
    return index % num_generations == num_generations - 1 and gold[index] is not None


@contextlib.contextmanager
def _prefill_once_per_prompt(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, `model.generate` prefills each distinct prompt of its batch once (see `_prompt_cache`), and
    plain sampling (`_plain_sampling`) runs in `_sample_rows`, which stops computing each row at its end of turn."""
    generate = model.generate
    own = vars(model).get("generate")  # an attribute set on the instance, to put back afterwards

    def shared_prefill(*args: Any, **kwargs: Any) -> Any:
        config = kwargs.get("generation_config")
        if (
            not args
            and set(kwargs) == {"input_ids", "attention_mask", "generation_config"}
            and config is not None
            and config.use_cache is not False  # None: the model's default, a cache
            and config.cache_implementation is None
        ):
            cache = _prompt_cache(model, kwargs["input_ids"], kwargs["attention_mask"])
            if cache is not None and _plain_sampling(config):
                return _sample_rows(model, kwargs["input_ids"], kwargs["attention_mask"], cache, config)
            if cache is not None:
                kwargs[_CACHE] = cache
        return generate(*args, **kwargs)

    model.generate = shared_prefill
    try:
        yield
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own


def _plain_sampling(config: Any) -> bool:
    """Whether `config` asks for sampling from the tempered softmax and nothing else (trl's defaults: no top-k, top-p,
    min-p, repetition penalty or other logits processor), with a length limit in new tokens."""
    from transformers import GenerationConfig

    allowed = {
        "max_new_tokens", "do_sample", "temperature", "pad_token_id", "bos_token_id", "eos_token_id", "use_cache",
        "disable_compile", "transformers_version", "cache_implementation", "top_p", "top_k", "min_p",
        "repetition_penalty",
    }  # fmt: skip
    changed = set(config.to_diff_dict()) - {"_from_model_config"}
    return (
        changed <= allowed
        and config.do_sample is True
        and (config.temperature or 0) > 0
        and config.max_new_tokens is not None
        and config.eos_token_id is not None
        and config.top_p in (None, 1.0)
        and config.top_k in (None, 0)
        and config.min_p is None
        and config.repetition_penalty in (None, 1.0)
        and config.num_return_sequences in (None, 1)
        and GenerationConfig().num_beams == config.num_beams
    )


def _sample_rows(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any, config: Any
) -> torch.Tensor:
    """Sampled completions of left-padded prompts, returned as `generate` returns them: (B, P + T), each row's
    tokens after its end of turn set to the pad token, T the longest completion.

    `cache` holds every row's prompt less its last token (`_prompt_cache`). Unlike `generate`, which computes every
    row until the last one ends, a row that has written an end-of-turn token leaves the batch (its cache rows are
    dropped): SmolLM2's completions in the recipe average about 40 tokens where the longest run to 64. Each step
    writes its keys and values into buffers allocated once (`_PreallocatedLayer`). Tokens are drawn by `_draw`, one
    uniform number per row."""
    eos = torch.tensor(config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id])
    pad = config.pad_token_id if config.pad_token_id is not None else int(eos[0])
    batch = input_ids.size(0)
    positions = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)  # (B, P)
    completions = torch.full((batch, config.max_new_tokens), pad, dtype=input_ids.dtype)  # (B, max_new)
    rows = torch.arange(batch)  # (b,): the rows still sampling, by their index in the batch
    token, position, mask = input_ids[:, -1:], positions[:, -1:], attention_mask  # (b, 1), (b, 1), (b, P + t)
    length = 0
    _preallocate(cache, config.max_new_tokens)
    with torch.no_grad(), _layers_for_sampling(model):
        for step in range(config.max_new_tokens):
            logits = model(
                input_ids=token, attention_mask=mask, position_ids=position, use_cache=True, **{_CACHE: cache}
            ).logits[:, -1]  # (b, V)
            drawn = _draw(logits, config.temperature)  # (b,)
            completions[rows, step] = drawn
            length = step + 1
            going = ~torch.isin(drawn, eos)  # (b,)
            if not going.any():
                break
            if not going.all():
                keep = going.nonzero().squeeze(1)  # (b',)
                cache.batch_select_indices(keep)
                rows, drawn, position, mask = rows[keep], drawn[keep], position[keep], mask[keep]
            token, position = drawn.unsqueeze(1), position + 1  # (b, 1) each
            mask = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1)  # (b, P + t + 1)
    return torch.cat([input_ids, completions[:, :length]], dim=1)  # (B, P + T)


def _preallocate(cache: Any, room: int) -> None:
    """Give each plain layer of `cache` (transformers' `DynamicLayer`) room for `room` more positions, in place."""
    layers = getattr(cache, "layers", None) or []
    for index, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4:
            layers[index] = _PreallocatedLayer(layer, room)


class _PreallocatedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of buffers with room for more positions: a decoding step
    writes its position in place, where `DynamicLayer` concatenates, copying every row's whole cache at every step
    (about a tenth of sampling SmolLM2 on one CPU thread). Dropping rows copies the buffers once."""

    def __init__(self, layer: DynamicLayer, room: int) -> None:
        super().__init__()
        self.device, self.is_initialized = layer.keys.device, True
        self._length = layer.keys.size(-2)
        self._buffers = [_with_room(states, room) for states in (layer.keys, layer.values)]  # (b, h, L + room, d)
        self._expose()

    def _expose(self) -> None:
        self.keys, self.values = (buffer[:, :, : self._length] for buffer in self._buffers)  # (b, h, L, d) each

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._length + key_states.size(-2)
        if end > self._buffers[0].size(-2):  # out of room: as much again as is needed
            self._buffers = [_with_room(buffer[:, :, : self._length], end) for buffer in self._buffers]
        for buffer, states in zip(self._buffers, (key_states, value_states), strict=True):
            buffer[:, :, self._length : end] = states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._buffers = [buffer[indices] for buffer in self._buffers]
        self._expose()

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        # `_sample_rows` only appends positions and drops rows; the rest of `DynamicLayer`'s methods would change the
        # exposed views without the buffers.
        raise NotImplementedError(f"{type(self).__name__} only appends positions and drops rows")

    crop = batch_repeat_interleave = reorder_cache = reset = offload = prefetch = _unsupported


def _with_room(states: torch.Tensor, room: int) -> torch.Tensor:
    """`states` (b, h, L, d) at the start of a new buffer (b, h, L + room, d)."""
    batch, heads, length, dim = states.shape
    buffer = states.new_empty(batch, heads, length + room, dim)
    buffer[:, :, :length] = states
    return buffer


@contextlib.contextmanager
def _layers_for_sampling(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, each linear layer of `model` runs as one matrix product with its weight laid out for
    oneDNN ahead of time (`_SamplingLinear`); the original layers are put back afterwards, untouched.

    A LoRA layer (one active adapter, enabled, no DoRA, not merged) becomes a layer whose weight is base + scale x B A,
    in the base weight's dtype: the same function up to the rounding of the merged weight. A token's step then runs
    one matrix product per layer where the adapter ran three, with casts to the adapter's float32: about a fifth of
    sampling SmolLM2 with LoRA on 12 of its 30 blocks, on one CPU thread. peft's own `merge_adapter` and
    `unmerge_adapter` would add the product to the base weights and subtract it again, which in bf16 does not give the
    frozen weights back. Every other plain linear layer keeps its weight and gains the prepared layout, prepared once
    and kept on the layer while its weight is unchanged."""
    from peft.tuners.lora import LoraLayer

    swapped: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []
    inside_lora: set[str] = set()  # LoRA layers, whose own linear layers (base, A, B) are theirs to run
    for name, module in list(model.named_modules()):
        if not name or any(name.startswith(f"{outer}.") for outer in inside_lora):
            continue
        if isinstance(module, LoraLayer):
            inside_lora.add(name)
            replacement = _merged_lora(module)
        elif type(module) is torch.nn.Linear:
            replacement = _SamplingLinear.of(module)
        else:
            continue
        if replacement is None:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        swapped.append((parent, child, module))
        setattr(parent, child, replacement)
    try:
        yield
    finally:
        for parent, child, module in swapped:
            setattr(parent, child, module)


def _merged_lora(module: Any) -> _SamplingLinear | None:
    """`module`'s LoRA layer as one linear layer with the adapter's product added to the base weight, or None where
    it is not one plain linear layer with one active, enabled, unmerged adapter without DoRA."""
    base = module.get_base_layer()
    if (
        not isinstance(base, torch.nn.Linear)
        or module.merged
        or module.disable_adapters
        or len(module.active_adapters) != 1
        or module.use_dora.get(module.active_adapters[0], False)
        or module.active_adapters[0] not in module.lora_A
    ):
        return None
    delta = module.get_delta_weight(module.active_adapters[0])  # (out, in)
    weight = (base.weight.float() + delta.float()).to(base.weight.dtype)  # (out, in)
    return _SamplingLinear(weight, base.bias, _packed(weight))


class _SamplingLinear(torch.nn.Module):
    """A linear layer for sampling without gradients: with `packed` (the weight laid out ahead of time in oneDNN's
    blocked format), oneDNN's product on it. On one CPU thread SmolLM2's 211 bf16 products for 24 rows took 39 ms
    that way against 51 ms through `torch.nn.functional.linear` on the plain weight (README, Performance), with values
    equal to the bit. Without `packed`, `torch.nn.functional.linear`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias, self.packed = weight, bias, packed

    @classmethod
    def of(cls, linear: torch.nn.Linear) -> _SamplingLinear:
        """`linear` with its packed weight, packed at the first call and kept on `linear` while the weight (its
        memory and version) stays the same: a frozen layer is packed once per training run."""
        weight = linear.weight
        key = (weight.data_ptr(), weight._version, weight.dtype)
        kept = getattr(linear, "_grpo_tools_packed", None)
        if kept is None or kept[0] != key:
            kept = (key, _packed(weight.detach()))
            linear._grpo_tools_packed = kept
        return cls(weight.detach(), linear.bias, kept[1])

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.packed is None or inputs.dtype != self.packed.dtype or inputs.requires_grad:
            return torch.nn.functional.linear(inputs, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(inputs.contiguous(), self.packed, self.bias, "none", [], "")


def _packed(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` (out, in) in oneDNN's layout for its bf16 linear product, or None off the CPU, for other dtypes, or
    where this build of torch or this CPU has no such product."""
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16 or weight.dim() != 2:
        return None
    try:
        if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
            return None
        return torch.ops.mkldnn._reorder_linear_weight(weight, _SAMPLING_ROWS)
    except (AttributeError, RuntimeError):  # an operator this build of torch lacks, or refuses here
        return None


def _draw(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), by inverting the cumulative distribution at a uniform
    draw: a cumulative sum and a binary search per row, where `torch.multinomial` (as `generate` samples) draws an
    exponential number for every token of the vocabulary, about a tenth of a SmolLM2 rollout on one CPU thread.
    A token of probability 0 is never drawn (`right=True`: the first index whose cumulative sum exceeds the draw)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (b, V)
    cumulative = probs.cumsum(dim=-1)  # (b, V)
    uniform = torch.rand(probs.size(0), 1, device=probs.device) * cumulative[:, -1:]  # (b, 1)
    return torch.searchsorted(cumulative, uniform, right=True).squeeze(1).clamp(max=probs.size(1) - 1)  # (b,)


def _prompt_cache(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
    """The key/value cache of each row's prompt less its last token, computed once per distinct prompt.

    None where no two rows share a prompt, a prompt is all padding before its last token, or the model returns no
    cache: `generate` then prefills every row itself. Positions count real tokens from 0, as `generate` numbers them
    for left-padded rows.
    """
    length = input_ids.size(1)
    if length < 2:
        return None
    rows = torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=1)  # (b, 2L)
    distinct, row_prompt = torch.unique(rows, dim=0, return_inverse=True)  # (u, 2L), (b,)
    ids, mask = distinct[:, : length - 1], distinct[:, length : 2 * length - 1]  # (u, L - 1) each
    if distinct.size(0) == input_ids.size(0) or not mask.bool().any(dim=1).all():
        return None
    positions = (mask.cumsum(dim=-1) - 1).masked_fill(mask == 0, 0)  # (u, L - 1)
    output = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = getattr(output, _CACHE)
    if cache is None:
        return None
    cache.batch_select_indices(row_prompt)
    return cache
