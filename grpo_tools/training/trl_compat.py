"""The one place grpo-tools touches what trl (and transformers' `Trainer`) keep private.

`ToolGRPOTrainer` changes steps of trl's GRPO that trl exposes only as private methods, and reads trl's private
state. Here each private method trl calls is handed to a method of ours with a name and signature of our own (the
default runs trl's), each piece of private state is read through one property, and trl's vLLM weight sync is handed
the tensors of ours it sends (`sync_vllm_from_copies`), so that a trl release that renames or reshapes one of them
breaks this module alone, and `check_trl_version` refuses the releases it was not written for. `TRL_VERSIONS` is the range pyproject.toml declares (a test holds them equal): trl 1.15 is the first
whose `_generate_single_turn` takes `num_generations`, and whose importance-sampling correction neutralises NaN
sampling log-probabilities; 1.16 the first whose own log-probability path runs on a CPU without triton.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from grpo_tools.training.configs import ConfigError


__all__ = [
    "TRL_VERSIONS",
    "GRPOHooks",
    "TurnInputs",
    "check_trl_hooks",
    "check_trl_version",
    "labelled_positions_only_on_cpu",
    "sync_vllm_from_copies",
]

TRL_VERSIONS = ">=1.16,<2"


# trl's (and transformers' Trainer's) private methods that `GRPOHooks` overrides or calls, and the private state it
# reads (set by trl's `__init__`): a release that renames one would switch a step of ours off without a word.
_PRIVATE_METHODS = (
    "_generate_single_turn",
    "_generate_and_score_completions",
    "_calculate_rewards",
    "_compute_loss",
    "_get_per_token_logps_and_entropies",
    "_save_checkpoint",
    "_load_optimizer_and_scheduler",
    "_get_output_dir",
    "_get_train_sampler",
)
_PRIVATE_STATE = (
    "_metrics",
    "_logs",
    "_tokenizer",
    "_entropy_bonus_enabled",
    "use_vllm",
    "use_transformers_continuous_batching",
)


def check_trl_version(version: str | None = None) -> None:
    """Raise ConfigError naming the allowed range where the installed trl (or `version`) lies outside it, or naming
    the private hook the installed trl lacks (`check_trl_hooks`)."""
    version = version or importlib.metadata.version("trl")
    if Version(version) not in SpecifierSet(TRL_VERSIONS):
        raise ConfigError(
            f"trl {version} is installed; grpo-tools' trainer runs with trl{TRL_VERSIONS} "
            f"(pip install 'trl{TRL_VERSIONS}')"
        )
    check_trl_hooks()


def check_trl_hooks() -> None:
    """Raise ConfigError where trl's `GRPOTrainer` lacks a private method `GRPOHooks` overrides or calls, or takes
    parameters under other names than ours, naming the method and the installed trl."""
    for name in _PRIVATE_METHODS:
        theirs = getattr(GRPOTrainer, name, None)
        if not callable(theirs):
            _refuse(f"has no method {name}")
        ours = vars(GRPOHooks).get(name)
        if ours is None:
            continue
        expected, ours_takes_more = _parameter_names(ours)
        given, theirs_takes_more = _parameter_names(theirs)
        shared = min(len(given), len(expected))
        # trl calls ours with its arguments, ours calls trl's with ours: the names must agree in order, and the
        # longer list is only allowed where the other side takes the rest (`*args` / `**kwargs`).
        if (
            given[:shared] != expected[:shared]
            or (len(given) > len(expected) and not ours_takes_more)
            or (len(given) < len(expected) and not theirs_takes_more)
        ):
            _refuse(f"has {name}({', '.join(given)}), where grpo-tools overrides {name}({', '.join(expected)})")


def _check_trl_state(trainer: Any) -> None:
    missing = [name for name in _PRIVATE_STATE if not hasattr(trainer, name)]
    if missing:
        _refuse(f"sets no {', '.join(missing)}, which grpo-tools reads")


def _parameter_names(function: Any) -> tuple[list[str], bool]:
    """The names of `function`'s parameters after `self`, and whether it takes more (`*args` or `**kwargs`)."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    named = [item.name for item in parameters if item.kind not in (item.VAR_POSITIONAL, item.VAR_KEYWORD)]
    return named, any(item.kind in (item.VAR_POSITIONAL, item.VAR_KEYWORD) for item in parameters)


def _refuse(
    problem: str, owner: str = "GRPOTrainer", loss: str = "adaptive KL or gold turns would silently do nothing"
) -> None:
    version = importlib.metadata.version("trl")
    tested = next(spec.version for spec in SpecifierSet(TRL_VERSIONS) if spec.operator == ">=")
    raise ConfigError(
        f"trl {version}'s {owner} {problem}: grpo-tools changes trl's GRPO through it "
        f"(grpo_tools/training/trl_compat.py), so {loss}; install the trl "
        f"grpo-tools was tested with (pip install 'trl~={tested}.0')"
    )


@contextmanager
def labelled_positions_only_on_cpu() -> Iterator[None]:
    """trl's fused LM head projects only the positions that have a label (the completion) where it runs its Triton
    kernels, and every position, prompt included, elsewhere, so that compilers such as Neuron's see fixed tile shapes.
    Nothing is compiled on the CPU, so inside this block the CPU takes the first way too: the same values, gradients
    and metrics, with the prompt positions (about two thirds of a SmolLM2 warm start's) left out of the vocabulary
    projection. trl decides through `trl.trainer.utils._use_triton`; if a later trl has no such name, nothing changes
    but the speed (and the test of this block fails, to say so).
    """
    import trl.trainer.utils as trl_utils

    use_triton = getattr(trl_utils, "_use_triton", None)
    if use_triton is None:
        yield
        return
    trl_utils._use_triton = lambda device: device.type == "cpu" or use_triton(device)
    try:
        yield
    finally:
        trl_utils._use_triton = use_triton


def sync_vllm_from_copies(
    generation: Any, named_weights: Callable[[torch.nn.Module], Iterator[tuple[str, torch.Tensor]]]
) -> bool:
    """Make trl's `VLLMGeneration` (of a peft model) send vLLM the tensors `named_weights(model)` yields, instead of
    merging the adapter into the base weights and unmerging it (trl's `_iter_named_params`). Everything else of
    trl's `sync_weights` runs as it is: colocated `load_weights` or the server's broadcast, sleep mode, the prefix
    cache; the parameters are gathered as trl gathers them (all at once, for DeepSpeed ZeRO-3, whose collective
    every process joins) and renamed as trl renames them. Under FSDP, whose parameters trl reads through its own
    traversal of the sharded modules, nothing is replaced and False is returned: trl's own sync (in-place merge) runs.
    """
    for name in ("_iter_named_params", "_fix_param_name_to_vllm"):
        if not callable(getattr(type(generation), name, None)):  # else ours would be set and never called
            _refuse(
                f"has no method {name}",
                owner=type(generation).__name__,
                loss="the weight sync would merge LoRA into the base weights in place, and the KL reference drift",
            )
    if generation._dist.is_fsdp:
        return False
    model = generation.model

    def named_params() -> Iterator[tuple[str, torch.Tensor]]:
        with generation._dist.gather_params(list(model.parameters())):
            for name, tensor in named_weights(model):
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                yield generation._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."]), tensor

    generation._iter_named_params = named_params
    return True


@dataclass
class TurnInputs:
    """The arguments of one generation turn besides the prompts, as trl passes them."""

    images: Any
    multimodal_fields: dict[str, Any] | None
    num_generations: int
    has_tool_images: bool = False


def offer_environment_tools(trainer: GRPOTrainer) -> None:
    """Render each environment's prompts with what its `_chat_tools` gives (an MCP server's own input schemas)
    instead of the schemas trl reads from the methods' signatures: trl keeps them in `_env_tools`, which its prompt
    rendering and `parse_response` accept as schemas or callables alike."""
    env_tools = getattr(trainer, "_env_tools", None)
    for name, pool in (getattr(trainer, "_environment_pool", None) or {}).items():
        chat_tools = getattr(pool[0], "_chat_tools", None) if pool else None
        if env_tools is not None and chat_tools is not None:
            env_tools[name] = list(trainer._standalone_tools) + chat_tools()


class GRPOHooks(GRPOTrainer):
    """trl's `GRPOTrainer` with its private steps under names of ours. A subclass overrides `generate_turn`,
    `generate_and_score`, `score_completions`, `policy_loss`, `token_logps`, `train_sampler`, `save_extra_state` and
    `load_extra_state`, and calls `super()` for trl's own behaviour."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _check_trl_state(self)
        offer_environment_tools(self)

    # trl's private steps, each handed to ours.
    def _generate_single_turn(
        self,
        prompt_ids: list[list[int]],
        images: Any,
        multimodal_fields: dict[str, Any] | None,
        num_generations: int,
        has_tool_images: bool = False,
    ) -> tuple[list[list[int]], Any]:
        return self.generate_turn(prompt_ids, TurnInputs(images, multimodal_fields, num_generations, has_tool_images))

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        return self.generate_and_score(inputs)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        return self.score_completions(inputs, prompts, completions, completion_ids_list)

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        return self.policy_loss(model, inputs)

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
        return self.token_logps(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **inputs
        )

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        return self.train_sampler(dataset)

    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        if self.args.should_save:  # written first: a checkpoint complete enough to resume from holds it
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            os.makedirs(folder, exist_ok=True)
            self.save_extra_state(folder)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        # transformers hands the resolved checkpoint folder here when resuming, as trl's entropy controller reads it.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_extra_state(checkpoint)

    # trl's own behaviour, for overrides to fall back on.
    def generate_turn(self, prompt_ids: list[list[int]], turn: TurnInputs) -> tuple[list[list[int]], Any]:
        """Completion token ids of `prompt_ids` and their sampling log-probabilities (None without vLLM)."""
        return super()._generate_single_turn(
            prompt_ids, turn.images, turn.multimodal_fields, turn.num_generations, turn.has_tool_images
        )

    def generate_and_score(self, inputs: Any) -> dict[str, Any]:
        """The batch trl trains on: completions, their rewards, advantages and log-probabilities."""
        return super()._generate_and_score_completions(inputs)

    def score_completions(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        """Rewards (B, num_funcs) over all processes, NaN where a function abstains."""
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        """trl's GRPO loss of one micro-batch; it appends the micro-batch's KL to `step_metrics["kl"]`."""
        return super()._compute_loss(model, inputs)

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
        """Per-token log-probabilities (B, K), entropies (B, K) or None, and the auxiliary loss or None."""
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **inputs
        )

    def train_sampler(self, dataset: Any = None) -> Any:
        """The sampler of training prompts (trl's `RepeatSampler`: each prompt `num_generations` times in a row)."""
        return super()._get_train_sampler(dataset)

    def save_extra_state(self, folder: str) -> None:
        """Write what a subclass must resume with into a checkpoint folder, before trl's own files."""

    def load_extra_state(self, folder: str) -> None:
        """Read it back when training resumes from `folder`."""

    # trl's private state.
    def replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        """Put `advantages` (all processes' completions of the batch just scored, in trl's order) in place of the
        group advantages trl recorded for them in its completion table (`log_completions`), so that the table shows
        the advantages the loss uses."""
        logged = self._logs["advantages"]  # trl's deque, its last entries this batch's
        values = advantages.tolist()[-len(logged) :] if len(logged) else []
        for offset, value in enumerate(values, start=len(logged) - len(values)):
            logged[offset] = value

    @property
    def step_metrics(self) -> dict[str, list[float]]:
        """The metrics trl logs at the next logging step, of the mode the model is in (train or eval)."""
        return self._metrics["train" if self.model.training else "eval"]

    @property
    def text_tokenizer(self) -> Any:
        """The tokenizer of the processing class (the class itself for text models)."""
        return self._tokenizer

    @property
    def entropy_bonus_enabled(self) -> bool:
        """Whether the loss differentiates the entropy (trl's `entropy_coef` or adaptive entropy)."""
        return self._entropy_bonus_enabled

    @property
    def generates_whole_batch(self) -> bool:
        """Whether generation takes every row at once (vLLM or transformers' continuous batching), rather than
        `generate` on the rows it is given."""
        return bool(self.use_vllm or self.use_transformers_continuous_batching)
