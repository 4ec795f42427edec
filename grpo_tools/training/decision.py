"""Teaching the decision to call: advantages whose baseline reaches past the group, prompts sampled in a set share of
rows that need no call, and the shares of samples that call and that are right, per class of row.

Under trl's group baseline, a group whose samples all earn the same reward has advantage 0 and teaches nothing. That
is the rule for a class of row the model gets reliably right: a no-call row whose samples all abstain stops pulling
towards abstaining, while every call row whose samples sometimes call keeps pulling the other way.
- `baseline_advantages`: `advantage_baseline: batch` measures each completion against the mean reward of the whole
  batch, as REINFORCE++ does (Hu et al., 2025, arXiv 2501.03262), so an all-abstaining no-call group that earns more
  than the batch's mean is reinforced; `class` against the mean of the completions of its class of row (needs a call,
  needs none), so each class is reinforced against its own average and neither class's rewards set the other's
  baseline (an all-abstaining no-call group then gets 0 where every no-call completion of the batch earns the same). DAPO's filter of groups without spread (`skip_zero_std_groups`, arXiv 2503.14476) drops exactly those
  groups, so it is refused beside either.
- `BalancedRepeatSampler`: trl's `RepeatSampler` with `no_call_share` of its prompts drawn from rows that need no
  call (usable weighs the two classes equally; a split with 80 no-call rows of 290 otherwise gives a step about 28% of
  them, and fewer by chance). The share is exact over a run: where a batch cannot hold it in whole prompts (half of 1,
  3 or 5), batches hold it rounded down or up, so that the no-call prompts drawn so far are always within one of the
  share of all prompts drawn.
- `DecisionCounts`: per class, the samples, those that call and those that are right (BFCL's verdict where a call is
  needed, no call where none is), logged each step as `decision/call_rows/call`, `decision/call_rows/right`,
  `decision/no_call_rows/call` and `decision/no_call_rows/right`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.utils import RepeatSampler

from grpo_tools.training.errors import ConfigError


__all__ = [
    "BASELINES",
    "BalancedRepeatSampler",
    "DecisionCounts",
    "DecisionHooks",
    "baseline_advantages",
    "decision_counts",
    "needs_call",
]

BASELINES = ("group", "batch", "class")


def needs_call(answers: Any) -> bool:
    """Whether a row (its `answers`, a list or its JSON text) needs a call."""
    return bool(json.loads(answers) if isinstance(answers, str) else answers)


def baseline_advantages(
    rewards: torch.Tensor, num_generations: int, baseline: str, scale: str, call_rows: torch.Tensor | None = None
) -> torch.Tensor:
    """Advantages (N,) of the weighted rewards (N,) of a batch grouped by prompt (`num_generations` consecutive
    completions a group), NaN where a completion is unscorable (its advantage is then 0).

    `baseline`: `group` (trl's: each group's mean), `batch` (the mean of every scorable completion) or `class` (the
    mean of the completions whose rows share `call_rows`, bool (N,)). `scale`: `none` leaves the differences as they
    are; `group` divides by each group's std under the group baseline; otherwise (and under `batch` and `class`, where
    a group's std may be 0 while its advantage is not) by the batch's std, as REINFORCE++ normalises."""
    grouped = rewards.view(-1, num_generations)  # (groups, G)
    if baseline == "group":
        mean = torch.nanmean(grouped, dim=1, keepdim=True).expand_as(grouped).reshape(-1)  # (N,)
    elif baseline == "batch":
        mean = torch.nanmean(rewards).expand_as(rewards)  # (N,)
    elif baseline == "class":
        if call_rows is None:
            raise ValueError("the class baseline needs each completion's class of row (call_rows)")
        mean = torch.empty_like(rewards)  # (N,)
        for members in (call_rows, ~call_rows):
            if members.any():
                mean[members] = torch.nanmean(rewards[members])
    else:
        raise ValueError(f"advantage_baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    advantages = rewards - mean  # (N,)
    if scale != "none":
        if baseline == "group" and scale == "group":
            std = _nanstd(grouped, dim=1).repeat_interleave(num_generations)  # (N,)
        else:
            std = _nanstd(rewards, dim=0).expand_as(rewards)  # (N,)
        advantages = advantages / (std + 1e-4)  # trl's epsilon
    return torch.nan_to_num(advantages, nan=0.0)


def _nanstd(values: torch.Tensor, dim: int) -> torch.Tensor:
    """The sample standard deviation (Bessel's correction, as trl's `nanstd`) over `dim`, ignoring NaN."""
    count = (~torch.isnan(values)).sum(dim=dim)
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    squares = torch.nansum((values - mean) ** 2, dim=dim)
    return torch.sqrt(squares / (count - 1).clamp(min=1))


class BalancedRepeatSampler(RepeatSampler):
    """trl's `RepeatSampler` (each prompt `mini_repeat_count` times in a row, each batch of `batch_size` prompts
    `repeat_count` times), with `no_call_share` of the prompts drawn from the rows that need no call and the rest from
    the rows that need one.

    Batch k of the run (counted across epochs) holds `floor((k + 1) s + phase) - floor(k s + phase)` no-call prompts,
    s = `no_call_share x batch_size`: s itself when it is a whole number, else s rounded down or up, so that after k
    batches the no-call prompts drawn are within one of k s (error diffusion). The phase, in [0, 1), is drawn from
    `seed` (by a generator of its own, so the shuffles are those of a share a batch can hold).

    Each class is walked in its own shuffled order, shuffled again when used up, so the smaller class repeats within
    an epoch; an epoch has as many batches as trl's sampler gives (`len` is the same). Within a batch the prompts are
    shuffled, so that each process's slice mixes the classes."""

    def __init__(
        self,
        data_source: Any,
        call_rows: Sequence[bool],
        no_call_share: float,
        mini_repeat_count: int,
        batch_size: int = 1,
        repeat_count: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(data_source, mini_repeat_count, batch_size, repeat_count, shuffle=True, seed=seed)
        if len(call_rows) != self.num_samples:
            raise ValueError(f"call_rows has {len(call_rows)} entries for {self.num_samples} rows")
        # s, not necessarily a whole number (rounded past float noise: 0.7 x 10 is 7.000000000000001)
        self.no_call_per_batch = round(no_call_share * batch_size, 9)
        self._phase = 0.0
        if not float(self.no_call_per_batch).is_integer():
            generator = torch.Generator().manual_seed(seed) if seed is not None else None
            self._phase = torch.rand(1, generator=generator).item()
        self._batches_drawn = 0  # over the run, so that the share is exact across epochs too
        pools = ([i for i, call in enumerate(call_rows) if call], [i for i, call in enumerate(call_rows) if not call])
        for pool, wanted, what in zip(pools, (no_call_share < 1.0, no_call_share > 0.0), ("", "no "), strict=True):
            if wanted and not pool:
                raise ValueError(
                    f"no_call_share {no_call_share} asks for rows that need {what}call; the data has none"
                )
        self._pools = pools
        self._orders: list[list[int]] = [[], []]

    def _no_call_prompts(self, batch: int) -> int:
        """How many of the prompts of the run's batch `batch` need no call (the class docstring's schedule)."""
        share, phase = self.no_call_per_batch, self._phase
        return math.floor((batch + 1) * share + phase) - math.floor(batch * share + phase)

    def _draw(self, pool: int, count: int) -> list[int]:
        drawn: list[int] = []
        while len(drawn) < count:
            if not self._orders[pool]:
                members = self._pools[pool]
                order = torch.randperm(len(members), generator=self.generator).tolist()
                self._orders[pool] = [members[i] for i in order]
            take = min(count - len(drawn), len(self._orders[pool]))
            drawn += self._orders[pool][:take]
            del self._orders[pool][:take]
        return drawn

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.num_samples // self.batch_size):
            no_call = self._no_call_prompts(self._batches_drawn)
            self._batches_drawn += 1
            chunk = self._draw(0, self.batch_size - no_call) + self._draw(1, no_call)
            chunk = [chunk[i] for i in torch.randperm(len(chunk), generator=self.generator).tolist()]
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index


@dataclass
class DecisionCounts:
    """Sampled completions of one batch, per class of row: how many there are, call, and are right."""

    call_rows: int = 0
    call_rows_called: int = 0
    call_rows_right: int = 0
    no_call_rows: int = 0
    no_call_rows_called: int = 0

    def as_tensor(self) -> torch.Tensor:
        """(5,) float64, in field order, for a sum over processes."""
        return torch.tensor(
            [self.call_rows, self.call_rows_called, self.call_rows_right, self.no_call_rows, self.no_call_rows_called],
            dtype=torch.float64,
        )

    @staticmethod
    def metrics(totals: Sequence[float]) -> dict[str, float]:
        """The logged shares from summed counts (`as_tensor` order); a class absent from the batch logs nothing."""
        call_rows, called, right, no_call_rows, no_call_called = totals
        shares = {}
        if call_rows:
            shares["decision/call_rows/call"] = called / call_rows
            shares["decision/call_rows/right"] = right / call_rows
        if no_call_rows:
            shares["decision/no_call_rows/call"] = no_call_called / no_call_rows
            shares["decision/no_call_rows/right"] = 1.0 - no_call_called / no_call_rows
        return shares


def decision_counts(
    completions: Sequence[Any], rows: Sequence[dict[str, Any]], sampled: Sequence[bool], judge: str = "bfcl"
) -> DecisionCounts:
    """Count the decision of each sampled completion (`sampled` false: a gold turn, left out) on its row; right is
    the decision reward's right call (by `judge`) on a call row, and no call on a no-call row."""
    from grpo_tools.rewards import decision_outcome, make_gold
    from grpo_tools.rewards.scorers import parse_completion

    counts = DecisionCounts()
    for completion, row, is_sample in zip(completions, rows, sampled, strict=True):
        if not is_sample:
            continue
        text = completion if isinstance(completion, str) else _last_text(completion)
        gold = make_gold(row["tools"], row["answers"], row.get("possible_answers"), f"id={row.get('id')}")
        outcome, _ = decision_outcome(parse_completion(text, gold), gold, judge)
        if outcome in ("quiet", "unexpected"):
            counts.no_call_rows += 1
            counts.no_call_rows_called += outcome == "unexpected"
        else:
            counts.call_rows += 1
            counts.call_rows_called += outcome != "abstain"
            counts.call_rows_right += outcome == "right"
    return counts


def _last_text(completion: Any) -> str:
    """A conversational completion's text (its messages' contents, joined)."""
    return "".join(str(message.get("content") or "") for message in completion)


class DecisionHooks:
    """What `ToolGRPOTrainer` does for the decision to call, as methods it inherits before `GRPOHooks`: the
    advantages of `advantage_baseline` (`_advantages`), the sampler of `no_call_share` (`train_sampler`) and the
    `decision/` metrics (`_log_decision`). It reads the trainer's state (`args`, `accelerator`, the last rewards)."""

    def _log_decision(self, inputs: Any, completions: Any) -> None:
        """Per class of row, the shares of this batch's samples (gold turns left out) that call and that are right."""
        gold = self._gold_texts if self.model.training else None
        sampled = [not slot for slot in self._gold_slots(gold, self.num_generations)] if gold else [True] * len(inputs)
        counts = decision_counts(completions, inputs, sampled, getattr(self.args, "decision_judge", "bfcl"))
        totals = self.accelerator.reduce(counts.as_tensor().to(self.accelerator.device), reduction="sum")  # (5,)
        for key, value in DecisionCounts.metrics(totals.tolist()).items():
            self.step_metrics[key].append(value)

    def train_sampler(self, dataset: Any = None) -> Any:
        """trl's sampler, or with `no_call_share` one that puts that share of no-call rows in every batch."""
        share = getattr(self.args, "no_call_share", None)
        dataset = self.train_dataset if dataset is None else dataset
        if share is None:
            return super().train_sampler(dataset)
        if "answers" not in getattr(dataset, "column_names", ()):
            raise ConfigError("no_call_share needs rows with `answers`, to tell the rows that need no call")
        return BalancedRepeatSampler(
            dataset,
            [needs_call(answers) for answers in dataset["answers"]],
            share,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            seed=self.args.seed,
        )

    def _check_decision_data(self) -> None:
        """Refuse the class baseline on a dataset whose rows cannot say whether they need a call."""
        columns = getattr(self.train_dataset, "column_names", None)
        class_baseline = getattr(self.args, "advantage_baseline", "group") == "class"
        if class_baseline and columns is not None and "answers" not in columns:
            raise ConfigError(
                "advantage_baseline class needs rows with `answers`, to tell the rows that need a call from those that "
                f"need none; this dataset has {', '.join(columns)}"
            )

    def _advantages(self, inputs: Any, baseline: str) -> torch.Tensor:
        """This process's advantages (B,) against the batch's or the class's mean, from all processes' rewards; trl's
        completion table (`log_completions`) gets all processes' advantages in place of its group ones."""
        rewards = self._last_rewards  # (B x processes, num_funcs)
        weighted = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)  # (B x processes,)
        weighted[torch.isnan(rewards).all(dim=1)] = torch.nan  # unscorable: advantage 0, as trl
        call_rows = None  # read only by the class baseline: `batch` needs no `answers`
        if baseline == "class":
            local = torch.tensor(
                [needs_call(row["answers"]) for row in inputs], device=self.accelerator.device
            )  # (B,)
            call_rows = self.accelerator.gather(local).to(rewards.device)  # (B x processes,)
        advantages = baseline_advantages(weighted, self.num_generations, baseline, self.scale_rewards, call_rows)
        self.replace_logged_advantages(advantages)
        start = self.accelerator.process_index * len(inputs)
        return advantages[start : start + len(inputs)].to(self.accelerator.device)  # (B,)
