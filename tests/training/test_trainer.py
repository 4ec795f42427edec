"""Tests for `grpo_tools.training.trainer.ToolGRPOTrainer` on the tiny offline model: the reference is the base model with the
adapter disabled (no second copy), the adaptive coefficient holds the KL near its target where a fixed one does not,
rollouts come from the adapter as updated, non-finite rewards stop the run with the last checkpoint intact,
`skip_zero_std_groups` trains on exactly the groups whose rewards differ, `gold_in_group` puts each row's gold turn in
its group, and the configuration errors that would make adaptive KL meaningless. The CPU fast path's own tests are in
tests/fastpath."""

import json
import math
import os

import pytest
import torch
from peft import PeftModel
from trainer_builders import make_trainer
from transformers import AutoModelForCausalLM, TrainerCallback

from grpo_tools.data.prompts import load_rows
from grpo_tools.rewards import get_reward_funcs
from grpo_tools.training.configs import ConfigError, ModelConfig, ToolGRPOConfig, model_init_kwargs
from grpo_tools.training.trainer import KL_STATE_FILE, TrainingDivergedError


def test_reference_is_the_base_model_with_the_adapter_disabled(tiny_model_dir, small_data, tmp_path):
    from trl.trainer.utils import use_adapter

    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path)
    assert trainer.ref_model is None  # no second model is built
    assert isinstance(trainer.model, PeftModel)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    base_params = sum(p.numel() for p in base.parameters())
    lora_params = sum(p.numel() for name, p in trainer.model.named_parameters() if "lora_" in name)
    assert sum(p.numel() for p in trainer.model.parameters()) == base_params + lora_params  # one copy of the weights

    # Move the adapter away from the identity, then ask for reference log-probs the way trl does.
    with torch.no_grad():
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    ids = trainer.processing_class("Weather in Lyon?", return_tensors="pt").input_ids  # (1, T)
    with torch.no_grad(), use_adapter(trainer.model, adapter_name=None):
        reference = torch.log_softmax(trainer.model(ids).logits, dim=-1)  # (1, T, V)
    with torch.no_grad():
        adapted = torch.log_softmax(trainer.model(ids).logits, dim=-1)  # (1, T, V)
        expected = torch.log_softmax(base(ids).logits, dim=-1)  # (1, T, V)
    torch.testing.assert_close(reference, expected)
    assert not torch.allclose(adapted, expected)  # the adapter does change the policy


def kl_run(model_dir, train_path, output_dir, **overrides):
    # A constant, high learning rate and a reward any model can climb push the policy away from the reference fast.
    trainer = make_trainer(
        model_dir, train_path, output_dir, max_steps=40, learning_rate=2e-2, lr_scheduler_type="constant", beta=0.01,
        **overrides,
    )  # fmt: skip
    trainer.train()
    kls = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    coefs = [entry["kl_coef"] for entry in trainer.state.log_history if "kl_coef" in entry]
    return trainer, kls, coefs


def test_adaptive_coefficient_holds_kl_near_target_where_a_fixed_one_does_not(tiny_model_dir, small_data, tmp_path):
    target = 0.015
    _, fixed_kls, _ = kl_run(tiny_model_dir, small_data["train"], tmp_path / "fixed", adaptive_kl=False)
    last_half = fixed_kls[len(fixed_kls) // 2 :]
    assert sum(last_half) / len(last_half) > 2 * target  # with a small fixed coefficient the KL runs past the target

    trainer, kls, coefs = kl_run(tiny_model_dir, small_data["train"], tmp_path / "adaptive", kl_target=target)
    last_half = kls[len(kls) // 2 :]
    assert target / 2 <= sum(last_half) / len(last_half) <= 2 * target
    assert max(coefs) > 0.1 and coefs[0] == 0.01  # the coefficient moved, from where it started
    assert len(trainer.kl_history) == 40 and math.isclose(trainer.beta, trainer.kl_history[-1][1])


def test_rollouts_come_from_the_updated_adapter(tiny_model_dir, small_data, tmp_path):
    def lora_fingerprint(model):
        return sum(float(p.detach().abs().sum()) for name, p in model.named_parameters() if "lora_" in name)

    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, max_steps=3, learning_rate=5e-2)
    at_generation, after_step = [], []
    generate = trainer._generate_single_turn

    def recording_generate(*args, **kwargs):
        at_generation.append(lora_fingerprint(trainer.model))
        return generate(*args, **kwargs)

    class AfterStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            after_step.append(lora_fingerprint(trainer.model))

    trainer._generate_single_turn = recording_generate
    trainer.add_callback(AfterStep())
    trainer.train()
    assert len(at_generation) == 3 and len(after_step) == 3
    assert len(set(at_generation)) == 3  # every rollout saw different weights...
    assert at_generation[1:] == pytest.approx(after_step[:-1], rel=1e-9)  # ...the ones the previous step left


def test_non_finite_rewards_stop_the_run_and_keep_the_last_checkpoint(tiny_model_dir, small_data, tmp_path):
    calls = []

    def breaks_at_step_three(completions, **kwargs):
        calls.append(1)
        return [math.inf if len(calls) >= 3 else 1.0 for _ in completions]

    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=[breaks_at_step_three], max_steps=4,
        save_strategy="steps", save_steps=2,
    )  # fmt: skip
    with pytest.raises(TrainingDivergedError, match="non-finite rewards at step 2"):
        trainer.train()
    checkpoints = sorted(name for name in os.listdir(tmp_path) if name.startswith("checkpoint-"))
    assert checkpoints == ["checkpoint-2"]
    saved = os.listdir(tmp_path / "checkpoint-2")
    assert {"adapter_model.safetensors", "trainer_state.json", KL_STATE_FILE} <= set(saved)


def test_tool_rewards_train_without_error(tiny_model_dir, small_data, tmp_path):
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=get_reward_funcs(["tool_format", "tool_partial"]),
        max_steps=2,
    )  # fmt: skip
    trainer.train()
    logged = trainer.state.log_history[0]
    assert "rewards/tool_partial_reward/mean" in logged and "tool_partial/missed_call" in logged
    assert logged["kl_coef"] == 0.04


def test_skipping_zero_std_groups_trains_on_exactly_the_groups_whose_rewards_differ(
    tiny_model_dir, small_data, tmp_path
):
    from trl.trainer.utils import use_adapter

    group_rewards = []

    def flat_on_half_the_prompts(completions, prompts, **kwargs):
        # Prompts of even length score 1 whatever is written (a group with no signal); the others count letters.
        rewards = [
            1.0 if len(str(prompt)) % 2 == 0 else float(text.count("e"))
            for text, prompt in zip(completions, prompts, strict=True)
        ]
        group_rewards.append([rewards[i : i + 4] for i in range(0, len(rewards), 4)])
        return rewards

    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=[flat_on_half_the_prompts], max_steps=6, learning_rate=5e-2,
        skip_zero_std_groups=True,
    )  # fmt: skip
    trained = []
    compute_loss = trainer._compute_loss

    def recording_compute_loss(model, inputs):
        trained.append(
            (inputs["advantages"].clone(), inputs["completion_mask"].sum().item(), inputs["num_items_in_batch"].item())
        )
        # The reference log-probs of the rows kept are those of the base model (the adapter disabled).
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)  # (B, P + T)
        with torch.no_grad(), use_adapter(trainer.model, adapter_name=None):
            logits = trainer.model(
                ids, attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            ).logits
        completion_logits = logits[:, inputs["prompt_ids"].size(1) - 1 : -1]  # (B, T, V)
        expected = (
            torch.log_softmax(completion_logits, -1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
        )
        mask = inputs["completion_mask"].bool()
        torch.testing.assert_close(inputs["ref_per_token_logps"][mask], expected[mask], atol=1e-4, rtol=1e-4)
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_compute_loss
    trainer.train()

    assert len(trained) == len(group_rewards) == 6
    informative_counts = []
    for (advantages, tokens, num_items), groups in zip(trained, group_rewards, strict=True):
        informative = sum(4 for group in groups if len(set(group)) > 1)
        informative_counts.append(informative)
        assert advantages.numel() == (informative or 8)  # a step with no signal at all trains on every row
        if informative:
            assert (advantages != 0).any()
        assert num_items == tokens  # the loss is normalized by the tokens it trains on
    assert any(0 < count < 8 for count in informative_counts)  # some steps dropped one group and kept the other
    logged = [
        entry["frac_completions_trained"] for entry in trainer.state.log_history if "frac_completions_trained" in entry
    ]
    assert logged == pytest.approx([count / 8 for count in informative_counts])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"skip_zero_std_groups": True, "gradient_accumulation_steps": 2}, "skip_zero_std_groups needs steps_per"),
        ({"beta": 0.0}, "adaptive_kl needs a starting beta > 0"),
        ({"kl_target": 0.0}, "kl_target must be > 0"),
        ({"kl_min": 0.1}, "need 0 < kl_min <= beta <= kl_max"),
        ({"reward_funcs": ["tool_magic"]}, "unknown reward_funcs"),
        ({"reward_funcs": ["tool_exact"], "reward_weights": [1.0, 2.0]}, "reward_weights has 2 values"),
    ],
)
def test_configurations_that_cannot_work_are_named(settings, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **settings)


def test_fixed_coefficient_and_no_penalty_are_allowed(tmp_path):
    assert ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, beta=0.0, adaptive_kl=False).beta == 0.0


@pytest.mark.parametrize(
    ("flags", "chosen", "warned"),
    [
        ("fpu sse avx2 fma", False, True),  # no native bf16: emulated, off, and a warning where a recipe asks
        ("avx2 avx512f avx512_bf16", False, False),  # avx512_bf16 alone: slower than float32 (docs/benchmarks.md)
        ("avx2 avx512f avx512_bf16 amx_bf16 amx_tile", True, False),  # AMX: faster
    ],
)
def test_bf16_is_chosen_on_the_cpu_only_where_it_was_measured_faster(flags, chosen, warned, tmp_path, caplog):
    """Left unset, bf16 is on where the CPU has AMX: on a Xeon with avx512_bf16 but no AMX a SmolLM2 training pass
    took 9.9 s under bf16 autocast against 8.6 s in float32, and the warm start of `make train` 6 min 17 s against
    3 min 35 s. The module runs afresh on a made-up /proc/cpuinfo (the tests' own fixture fixes the choice for every
    other test)."""
    import builtins
    import importlib.util
    import io

    spec = importlib.util.find_spec("grpo_tools.training.configs")
    configs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(configs)

    def cpuinfo(path, *args, **kwargs):
        if path == "/proc/cpuinfo":
            return io.StringIO(f"processor\t: 0\nflags\t\t: {flags}\n")
        return builtins.open(path, *args, **kwargs)

    configs.open = cpuinfo  # the module's own `open`, nothing else's
    with caplog.at_level("WARNING", logger="grpo_tools.training.configs"):
        assert configs.ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is chosen
    assert "bf16" not in caplog.text  # a choice is not warned about
    with caplog.at_level("WARNING", logger="grpo_tools.training.configs"):
        assert configs.ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=True).bf16  # taken at its word
    assert ("set bf16: false" in caplog.text) is warned


@pytest.mark.parametrize(
    ("native", "use_peft", "dtype", "expected"),
    [
        (True, True, None, "bfloat16"),  # LoRA on a CPU with native bf16: frozen weights in bf16
        (True, False, None, "auto"),  # full fine-tuning keeps its float32 master weights
        (False, True, None, "auto"),  # no native bf16: float32 (bf16 is off)
        (True, True, "float32", "float32"),  # a recipe's dtype is taken at its word
    ],
)
def test_lora_runs_in_bf16_on_the_cpu_load_their_frozen_weights_in_bf16(
    native, use_peft, dtype, expected, tmp_path, monkeypatch
):
    from grpo_tools.training import configs

    monkeypatch.setattr(configs, "cpu_has_native_bf16", lambda: native)
    monkeypatch.setattr(configs, "cpu_bf16_is_faster", lambda: native)
    args = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    assert model_init_kwargs(args, ModelConfig(use_peft=use_peft, dtype=dtype))["dtype"] == expected


def test_a_recipe_that_names_no_dtype_leaves_the_choice_to_model_init_kwargs(tmp_path, monkeypatch):
    """trl's `ModelConfig` says float32 when nothing is set, which hid the bf16 choice from every recipe."""
    from trl import TrlParser

    from grpo_tools.training import configs

    monkeypatch.setattr(configs, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(configs, "cpu_bf16_is_faster", lambda: True)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model_name_or_path: m\nuse_peft: true\nuse_cpu: true\noutput_dir: {tmp_path}\n")
    parser = TrlParser((ToolGRPOConfig, ModelConfig))
    training_args, model_args = parser.parse_args_and_config(args=["--config", str(recipe)])
    assert model_args.dtype is None
    assert model_init_kwargs(training_args, model_args)["dtype"] == "bfloat16"
    _, model_args = parser.parse_args_and_config(args=["--config", str(recipe), "--dtype", "float32"])
    assert model_init_kwargs(training_args, model_args)["dtype"] == "float32"  # and a set one is kept


def test_a_bf16_loaded_lora_run_trains_a_float32_adapter(tiny_model_dir, small_data, tmp_path, monkeypatch):
    """The frozen weights in bf16, the adapter in float32 (peft's default), and training moves the adapter."""
    from grpo_tools.training import configs

    monkeypatch.setattr(configs, "cpu_has_native_bf16", lambda: True)
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, max_steps=1, model_init_kwargs={"dtype": "bfloat16"}
    )
    lora = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    frozen = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16} and {p.dtype for p in lora.values()} == {torch.float32}
    trainer.train()
    moved = [
        name for name, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(p, lora[name])
    ]
    assert moved


def test_gold_in_group_makes_the_last_completion_of_each_group_the_rows_gold_turn(
    tiny_model_dir, small_data, tmp_path, monkeypatch
):
    """Every group then holds one right answer, scored like the samples beside it; the samples stay samples, and
    the rows the gold turns take are not sampled."""
    from trl import GRPOTrainer

    exact = get_reward_funcs(["tool_exact"])[0]
    seen = []
    sampled_rows = []
    generate = GRPOTrainer._generate_single_turn

    def recording_generate(self, prompt_ids, *args, **kwargs):
        sampled_rows.append(len(prompt_ids))
        return generate(self, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", recording_generate)

    def recording_exact(completions, **kwargs):
        scores = exact(completions, **kwargs)
        seen.extend(zip(completions, kwargs["answers"], scores, strict=True))
        return scores

    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=(recording_exact,), gold_in_group=True,
        max_steps=1, max_completion_length=160, temperature=1.0,
    )  # fmt: skip
    trainer.train()
    assert len(seen) == 8  # two groups of four
    assert sampled_rows == [6]  # three samples a group
    golds = {json.dumps(row["answers"]) for row in load_rows(small_data["train"])}
    for index in (3, 7):
        completion, answers, score = seen[index]
        assert completion.startswith("<tool_call>") or answers == "[]"
        assert score == 1.0  # the gold turn, parsed and scored like any completion
        assert answers in golds
    assert all(seen[index][2] == 0.0 for index in (0, 1, 2, 4, 5, 6))  # the tiny model's own samples are not gold
    assert trainer.state.log_history[0]["rewards/recording_exact/mean"] == pytest.approx(0.25)


def advantages_the_loss_sees(trainer, monkeypatch):
    """Train `trainer` and return, largest first, the advantages that reached trl's loss (after ours adjusted them);
    trl shuffles the rows before the loss, so their order is not the groups'."""
    from trl import GRPOTrainer

    seen = []
    compute_loss = GRPOTrainer._compute_loss

    def recording_compute_loss(self, model, inputs):
        seen.append(inputs["advantages"].detach().clone())
        return compute_loss(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", recording_compute_loss)
    trainer.train()
    return torch.cat(seen).flatten().sort(descending=True).values


def test_the_gold_turn_in_each_group_gets_trls_group_advantage(tiny_model_dir, small_data, tmp_path, monkeypatch):
    """Each group is three samples scoring 0 and the gold turn scoring 1: trl's advantages, measured against the whole
    group, are -0.5 for each sample and 1.5 for the gold turn (mean 0.25, standard deviation 0.5)."""
    trainer = make_trainer(
        tiny_model_dir, small_data["train"], tmp_path, reward_funcs=get_reward_funcs(["tool_exact"]),
        gold_in_group=True, max_steps=1, max_completion_length=160,
    )  # fmt: skip
    advantages = advantages_the_loss_sees(trainer, monkeypatch)
    assert advantages[:2].tolist() == pytest.approx([1.5, 1.5], abs=1e-3)
    assert advantages[2:].tolist() == pytest.approx([-0.5] * 6, abs=1e-3)


def test_gold_in_group_refuses_multi_turn_rows(tmp_path):
    from grpo_tools.training import build_trainer

    rows = [{"id": "m", "messages": [], "tools": [], "answers": [], "env": {"name": "workbench"}, "expected": 1}]
    args = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, gold_in_group=True)
    with pytest.raises(ConfigError, match="gold_in_group needs single-turn rows"):
        build_trainer("unused", None, rows, args, model_args=ModelConfig())
