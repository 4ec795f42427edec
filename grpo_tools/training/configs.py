"""Configuration: `ToolGRPOConfig` extends trl's `GRPOConfig`, `ToolScriptArguments` extends its `ScriptArguments`.

`ModelConfig` extends trl's: the same model and LoRA settings, with `dtype` unset unless a recipe sets it. Recipes are
YAML files read by `trl.TrlParser` into these three; any key can be overridden on the command line
(`--learning_rate 1e-5`). There is no other configuration surface.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from trl import GRPOConfig, ScriptArguments
from trl import ModelConfig as TrlModelConfig

from grpo_tools.tools.mcp_config import MCPArguments
from grpo_tools.training.budget_args import BudgetArguments
from grpo_tools.training.decision_args import DecisionArguments
from grpo_tools.training.errors import ConfigError
from grpo_tools.training.kl import KL_CONTROLLERS
from grpo_tools.training.reward_funcs import REWARD_FUNCS


__all__ = [
    "ConfigError",
    "ModelConfig",
    "ToolGRPOConfig",
    "ToolScriptArguments",
    "check_rows_fill_a_step",
    "cpu_bf16_is_faster",
    "cpu_has_native_bf16",
    "model_init_kwargs",
    "quantization_config",
    "tokenizer_kwargs",
]

logger = logging.getLogger(__name__)


def _cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo; Linux only (elsewhere none: we do not know)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return set(next((line for line in handle if line.startswith("flags")), "").split())
    except OSError:
        return set()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (avx512_bf16 or AMX) rather than emulating it."""
    return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())


def cpu_bf16_is_faster() -> bool:
    """Whether bf16 autocast beats float32 on this CPU, as measured (docs/benchmarks.md, "Precision on the CPU"):
    with AMX a SmolLM2 training pass took 0.4x float32's time; with avx512_bf16 alone, 1.15x, and sampling 1.3x."""
    return "amx_bf16" in _cpu_flags()


def model_init_kwargs(training_args: Any, model_args: Any, choose_dtype: bool = True) -> dict[str, Any]:
    """The keyword arguments the model is loaded with, by GRPO and by the warm start, as trl's own scripts build them:
    the recipe's `model_revision`, `attn_implementation`, `trust_remote_code` and quantization (`load_in_4bit`,
    `load_in_8bit`, `bnb_4bit_*`, `use_bnb_nested_quant`), and its `dtype`. Left unset, `dtype` is, with
    `choose_dtype`, bfloat16 for a LoRA run in bf16 on the CPU (its frozen weights are cast to bf16 by every autocast
    matmul anyway, and peft keeps the adapter in float32, so training computes the same, while sampling, outside
    autocast, reads half the bytes per token; docs/benchmarks.md), else as the checkpoint stores it; without
    `choose_dtype` it is left to trl (float32), as the warm start, which may train every weight, needs."""
    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
    }
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    quantization = quantization_config(model_args)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    if model_args.dtype:
        kwargs["dtype"] = model_args.dtype
    elif choose_dtype:
        on_cpu = training_args.use_cpu or not _cuda_available()
        lora_bf16 = training_args.bf16 and on_cpu and model_args.use_peft and cpu_has_native_bf16()
        kwargs["dtype"] = "bfloat16" if lora_bf16 else "auto"
    return kwargs


def quantization_config(model_args: Any) -> Any:
    """trl's `BitsAndBytesConfig` for the recipe's `load_in_4bit` / `load_in_8bit`, or None; a quantized recipe that
    cannot load (no bitsandbytes, or no LoRA to train on the frozen quantized weights) is refused here."""
    from trl import get_quantization_config

    flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit" if model_args.load_in_8bit else None
    if flag is None:
        return None
    if not _bitsandbytes_available():
        raise ConfigError(
            f"{flag} needs bitsandbytes, which is not installed (pip install bitsandbytes; it needs a GPU)"
        )
    if not model_args.use_peft:
        raise ConfigError(
            f"{flag} needs use_peft: true (quantized weights are frozen; LoRA trains an adapter on them)"
        )
    return get_quantization_config(model_args)


def tokenizer_kwargs(training_args: Any, model_args: Any) -> dict[str, Any]:
    """How the tokenizer is loaded: from the same revision as the model, with the same remote-code permission."""
    return {"revision": model_args.model_revision, "trust_remote_code": training_args.trust_remote_code}


def check_rows_fill_a_step(training_args: Any, rows: int, source: str) -> None:
    """Refuse training data too small for one optimizer step, which would train 0 steps without a word: trl samples
    whole generation batches (`generation_batch_size` = per_device_train_batch_size x processes x
    steps_per_generation completions, `num_generations` per prompt) and drops an incomplete one (its RepeatSampler),
    and one generation batch feeds the first optimizer step (steps_per_generation defaults to
    gradient_accumulation_steps)."""
    prompts = training_args.generation_batch_size // training_args.num_generations
    if rows >= prompts:
        return
    raise ConfigError(
        f"{source} holds {rows} rows, but one optimizer step needs {prompts} prompts "
        f"(per_device_train_batch_size {training_args.per_device_train_batch_size} x {training_args.world_size} "
        f"processes x steps_per_generation {training_args.steps_per_generation} / num_generations "
        f"{training_args.num_generations}; steps_per_generation defaults to gradient_accumulation_steps), so nothing "
        "would train: give more rows (or raise max_train_rows), or lower per_device_train_batch_size, "
        "gradient_accumulation_steps or steps_per_generation"
    )


def _bitsandbytes_available() -> bool:
    from transformers.utils import is_bitsandbytes_available

    return is_bitsandbytes_available()


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass
class ModelConfig(TrlModelConfig):
    """trl's model and LoRA settings, but `dtype` left unset by default, so that `model_init_kwargs` chooses it: trl
    defaults `dtype` to float32, and a default cannot be told from a recipe that asks for float32."""

    dtype: str | None = field(
        default=None,
        metadata={
            "help": "Load the model in this dtype. Unset: bfloat16 for a LoRA run in bf16 on a CPU with native bf16 "
            "(avx512_bf16 or AMX), else the checkpoint's own dtype.",
            "choices": ["auto", "bfloat16", "float16", "float32"],
        },
    )


@dataclass
class ToolGRPOConfig(GRPOConfig, DecisionArguments, BudgetArguments, MCPArguments):
    """trl's GRPO settings, plus an adaptive KL coefficient, tool-use rewards chosen by name, the settings of the
    decision to call (`DecisionArguments`), what one completion's calls may cost (`BudgetArguments`) and the MCP
    server a run's rollouts call (`MCPArguments`)."""

    beta: float = field(
        default=0.04,
        metadata={
            "help": "KL coefficient against the reference model; with `adaptive_kl` its starting value. 0 turns the KL "
            "penalty off (and needs `adaptive_kl: false`)."
        },
    )
    disable_dropout: bool = field(
        default=True,
        metadata={
            "help": "Switch every dropout of the policy off (LoRA's `lora_dropout` included). trl recomputes the old "
            "log-probabilities in train mode, so dropout makes an on-policy importance ratio differ from 1; with "
            "vLLM, which samples without dropout, keeping it is refused."
        },
    )
    adaptive_kl: bool = field(
        default=True,
        metadata={
            "help": "Adapt the KL coefficient after every optimizer step to hold the measured KL near `kl_target`."
        },
    )
    kl_target: float = field(
        default=0.05,
        metadata={"help": "Target for the measured KL (mean per-token k3 estimate over completion tokens)."},
    )
    kl_controller: Literal["band", "proportional"] = field(
        default="band",
        metadata={
            "help": "How the coefficient adapts: `band` (x1.5 above 1.5 x target, /1.5 below 0.5 x target) or "
            "`proportional` (Ziegler et al., 2019)."
        },
    )
    kl_min: float = field(default=1e-4, metadata={"help": "Lower bound of the adaptive KL coefficient (> 0)."})
    kl_max: float = field(default=10.0, metadata={"help": "Upper bound of the adaptive KL coefficient."})
    kl_horizon: int = field(
        default=10_000,
        metadata={
            "help": "`proportional` only: completions over which a persistent error changes the coefficient ~e-fold."
        },
    )
    skip_zero_std_groups: bool = field(
        default=False,
        metadata={
            "help": "Run the reference pass and the policy's forward and backward passes only on completions whose "
            "group's rewards differ (the others have advantage 0 and add only their KL term; the measured KL is then "
            "theirs); logged as `frac_completions_trained`. The filter of DAPO's dynamic sampling (Yu et al., 2025), "
            "without its resampling. Needs `steps_per_generation` 1."
        },
    )
    gold_in_group: bool = field(
        default=False,
        metadata={
            "help": "Single-turn rows only: the last completion of each group is the row's gold turn instead of a "
            "sample, so that every group holds one right answer to compare the samples with (off-policy guidance, "
            "as in LUFFY, Yan et al., 2025)."
        },
    )
    gold_anchor: float = field(
        default=0.0,
        metadata={
            "help": "With gold_in_group: this weight times the policy's mean negative log-likelihood of the batch's "
            "gold turns is added to the loss, a supervised anchor as in SASR (arXiv 2505.13026); 0 is GRPO alone."
        },
    )
    cpu_fast_path: Literal["auto", "on", "off"] = field(
        default="auto",
        metadata={
            "help": "Sampling and log-probabilities through grpo_tools.fastpath (each prompt prefilled once, merged "
            "LoRA and packed weights while sampling, the LM head over completion positions only): `auto` on the CPU, "
            "`on` (refused off the CPU), `off` for trl's own path.",
        },
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["tool_format", "tool_exact", "tool_partial"],
        metadata={
            "help": "Reward functions by registry name (grpo_tools.training.reward_funcs): "
            + "; ".join(f"{name}: {entry.description}" for name, entry in REWARD_FUNCS.items())
            + ". Weights: `reward_weights`. On multi-turn rows each call reward scores all the calls of a trajectory, "
            "and `outcome` and `extra_calls` are added with `outcome_reward_weight` and `extra_call_cost` unless named.",
            "choices": list(REWARD_FUNCS),
        },
    )
    outcome_reward_weight: float = field(
        default=1.0,
        metadata={
            "help": "Multi-turn rows only: weight of the outcome reward (1 when the final answer matches the row's "
            "`expected`), added to `reward_funcs` unless they name `outcome` (then its `reward_weights` entry weighs it)."
        },
    )
    extra_call_cost: float = field(
        default=0.1,
        metadata={
            "help": "Multi-turn rows only: reward lost per tool call beyond the row's gold calls (0 turns it off); "
            "the weight of `extra_calls`, added unless `reward_funcs` names it."
        },
    )
    tool_timeout: float = field(
        default=2.0,
        metadata={"help": "Multi-turn rows only: seconds a tool call may run before the model is told it timed out."},
    )
    bfcl_partial_credit: Literal["none", "state", "calls"] = field(
        default="none",
        metadata={
            "help": "`bfcl_turn` only: what a turn that fails BFCL's checks earns; `none` 0, `state` 0.5 when the "
            "APIs' state matches the ground truth's but a result it shows is missing, `calls` 0.5 x the share of the "
            "turn's state-changing ground-truth calls made exactly (docs/multi-turn.md says how each can be gamed).",
        },
    )
    bfcl_extra_call_cost: float = field(
        default=0.0,
        metadata={"help": "`bfcl_turn` only: reward lost per call beyond the count of the turn's ground-truth calls."},
    )

    def __post_init__(self) -> None:
        if self.bf16 is None and not self.fp16:
            import torch

            # trl turns bf16 on unless told otherwise, which transformers rejects where no GPU can run it: choose
            # bf16 where it is faster, full precision elsewhere (a recipe that sets `bf16` is taken at its word).
            # On the CPU that is AMX: emulated bf16 is several times slower than float32, and avx512_bf16 alone
            # was slower too (benchmarks/bench_precision.py).
            on_gpu = not self.use_cpu and torch.cuda.is_available()
            self.bf16 = torch.cuda.is_bf16_supported() if on_gpu else cpu_bf16_is_faster()
        super().__post_init__()
        if self.bf16 and (self.use_cpu or not _cuda_available()) and not cpu_has_native_bf16():
            logger.warning(
                "bf16 on a CPU without avx512_bf16 or AMX is emulated: a forward and backward pass of SmolLM2-135M "
                "took ten times longer than in float32 on such a CPU; set bf16: false"
            )
        unknown = [name for name in self.reward_funcs if name not in REWARD_FUNCS]
        if unknown:
            raise ConfigError(f"unknown reward_funcs {unknown}; choose from {', '.join(REWARD_FUNCS)}")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(
                f"reward_weights has {len(self.reward_weights)} values but reward_funcs names {len(self.reward_funcs)}"
            )
        if self.outcome_reward_weight < 0 or self.extra_call_cost < 0:
            raise ConfigError(
                f"outcome_reward_weight and extra_call_cost must be >= 0, got {self.outcome_reward_weight} and "
                f"{self.extra_call_cost}"
            )
        if self.gold_anchor < 0 or (self.gold_anchor and not self.gold_in_group):
            raise ConfigError(f"gold_anchor must be >= 0 and needs gold_in_group, got {self.gold_anchor}")
        if self.bfcl_extra_call_cost < 0:
            raise ConfigError(f"bfcl_extra_call_cost must be >= 0, got {self.bfcl_extra_call_cost}")
        if not self.tool_timeout > 0:
            raise ConfigError(f"tool_timeout must be > 0 seconds, got {self.tool_timeout}")
        if self.skip_zero_std_groups and self.steps_per_generation != 1:
            # trl splits a generation batch into equal parts, one per step; a filtered batch has no fixed size.
            raise ConfigError(
                f"skip_zero_std_groups needs steps_per_generation 1, got {self.steps_per_generation} (it defaults to "
                "gradient_accumulation_steps)"
            )
        self._check_combinations()
        self.check_decision_arguments()
        self.completion_budget()
        self.check_mcp_arguments()
        if self.kl_controller not in KL_CONTROLLERS:
            raise ConfigError(f"kl_controller must be one of {', '.join(KL_CONTROLLERS)}, got {self.kl_controller!r}")
        if self.beta < 0:
            raise ConfigError(f"beta must be >= 0, got {self.beta}")
        if self.adaptive_kl:
            if self.beta == 0:
                # trl builds no reference (and measures no KL) when beta is 0, so there would be nothing to adapt.
                raise ConfigError(
                    "adaptive_kl needs a starting beta > 0 (got beta=0); set beta, or adaptive_kl: false"
                )
            if not self.kl_target > 0:
                raise ConfigError(f"kl_target must be > 0, got {self.kl_target}")
            if not 0 < self.kl_min <= self.beta <= self.kl_max:
                raise ConfigError(f"need 0 < kl_min <= beta <= kl_max, got {self.kl_min}, {self.beta}, {self.kl_max}")
            if self.kl_horizon < 1:
                raise ConfigError(f"kl_horizon must be >= 1, got {self.kl_horizon}")

    def _check_combinations(self) -> None:
        """Settings that cannot work together, refused here so that the Python API refuses them too. (Multi-turn
        rows are known from the data: `gold_in_group` with them is refused by the trainer and by `grpo-tools train`.)"""
        if self.cpu_fast_path not in ("auto", "on", "off"):
            raise ConfigError(f"cpu_fast_path must be auto, on or off, got {self.cpu_fast_path!r}")
        if self.cpu_fast_path == "on" and not (self.use_cpu or not _cuda_available()):
            raise ConfigError("cpu_fast_path: on needs a run on the CPU (use_cpu: true, or no GPU); set auto or off")


@dataclass
class ToolScriptArguments(ScriptArguments):
    """Where the data comes from, and the optional warm start and evaluation around GRPO."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Training data: a canonical JSONL file (`grpo-tools convert` writes one), or a Hugging Face "
            "dataset of such rows (its train split)."
        },
    )
    eval_data: str | None = field(
        default=None,
        metadata={"help": "Held-out canonical rows: tool-call accuracy is measured on them before and after GRPO."},
    )
    max_train_rows: int | None = field(default=None, metadata={"help": "Use at most this many training rows."})
    max_eval_rows: int | None = field(default=None, metadata={"help": "Evaluate on at most this many rows."})
    eval_scorer: Literal["exact", "bfcl", "partial"] = field(
        default="exact", metadata={"help": "Reward that decides correctness in the before/after evaluation."}
    )
    eval_batch_size: int = field(default=32, metadata={"help": "Prompts generated at once during evaluation."})
    unrenderable_rows: Literal["error", "skip"] = field(
        default="error",
        metadata={
            "help": "Rows the model's chat template cannot render (e.g. Llama 3.2's refuses an assistant turn with "
            "several calls), as a prompt, a gold turn (`gold_in_group`, warm start) or a held-out prompt: `error` "
            "stops before training with one message naming each row and the template's reason; `skip` leaves them "
            "out of training with one warning line counting them, and scores held-out ones as failures."
        },
    )
    warmup_sft_epochs: float = field(
        default=0.0,
        metadata={
            "help": "Supervised warm start before GRPO (trl SFTTrainer on the gold calls), in epochs; 0 skips it. "
            "Teaches a model that does not know the call format yet, so that rewards are not all zero."
        },
    )
    warmup_sft_data: str | None = field(
        default=None,
        metadata={
            "help": "Rows the warm start trains on (a canonical JSONL file or a Hugging Face dataset); default: the "
            "GRPO training rows (`dataset_name`)."
        },
    )
    warmup_sft_peft: bool = field(
        default=False,
        metadata={
            "help": "Warm start a LoRA adapter (the recipe's `lora_*` settings) and merge it into the weights, "
            "instead of fine-tuning every weight: less memory and time on a CPU."
        },
    )
    warmup_sft_learning_rate: float = field(default=2e-3, metadata={"help": "Learning rate of the warm start."})
    warmup_sft_batch_size: int = field(default=16, metadata={"help": "Batch size of the warm start."})
