"""Tests for the weight sync to vLLM of a LoRA run: trl's real `VLLMGeneration.sync_weights` runs, with only the vLLM
engine faked (colocated: an `LLM` whose model records what `load_weights` receives; served: a `VLLMClient` that records
what it would broadcast). On the tiny model in bfloat16, with an adapter that moves between syncs as training moves it,
the base weights (the KL reference: the base with the adapter disabled) stay bit-identical over many syncs, and vLLM
receives the merged weights W + BA x scaling, within bf16 rounding, under the plain model's parameter names; the
copies are bit-identical to peft's own merge. A LoRA variant (DoRA) keeps trl's sync and says so; a vLLM run whose
policy keeps dropout, or puts a LoRA bias on a layer without a base bias, is refused before vLLM starts."""

import copy
import logging
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from trainer_builders import make_trainer
from transformers import AutoModelForCausalLM

from grpo_tools.training.configs import ConfigError
from grpo_tools.training.vllm_sync import merged_weights


SYNCS = 200


class RecordingModel:
    """vLLM's model as trl's colocated sync reaches it: keeps the last tensor loaded under each name."""

    def __init__(self) -> None:
        self.received: dict[str, torch.Tensor] = {}

    def load_weights(self, weights) -> None:
        for name, tensor in weights:
            self.received[name] = tensor.detach().clone()


class FakeLLM:
    """Stands in for `vllm.LLM`: only the path trl's colocated sync walks."""

    def __init__(self, **kwargs) -> None:
        self.recorder = RecordingModel()
        runner = SimpleNamespace(model=self.recorder)
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))
        )

    def reset_prefix_cache(self) -> None:
        pass


class FakeVLLMClient:
    """Stands in for trl's `VLLMClient` of a vLLM server: records the tensors it would broadcast."""

    def __init__(self, **kwargs) -> None:
        self.recorder = RecordingModel()

    def init_communicator(self, device) -> None:
        pass

    def get_server_info(self) -> dict:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def update_named_params(self, metadata, named_params) -> None:
        self.recorder.load_weights(named_params)

    def reset_prefix_cache(self) -> None:
        pass


def lora_vllm_trainer(model_dir, data, output_dir, monkeypatch, mode, dtype="bfloat16", **overrides):
    """A vLLM trainer on the tiny model in `dtype` with LoRA, whose vLLM engine (or server client) is faked."""
    monkeypatch.setattr("trl.generation.vllm_generation.is_vllm_available", lambda *args, **kwargs: True)
    monkeypatch.setattr("trl.generation.vllm_generation.LLM", FakeLLM, raising=False)
    monkeypatch.setattr("trl.generation.vllm_generation.VLLMClient", FakeVLLMClient)
    for variable, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "localhost"),
                            ("MASTER_PORT", "29511")):  # fmt: skip
        monkeypatch.setenv(variable, value)  # trl's colocated start-up sets them; restored after the test
    return make_trainer(
        model_dir, data, output_dir, use_vllm=True, vllm_mode=mode, model_init_kwargs={"dtype": dtype},
        **overrides,
    )  # fmt: skip


def received_weights(trainer) -> dict[str, torch.Tensor]:
    generation = trainer.vllm_generation
    engine = generation.llm if generation.mode == "colocate" else generation.vllm_client
    return engine.recorder.received


def expected_merged(model, base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """W + B A x scaling in float64 for every LoRA layer, under the plain model's name; W where there is no adapter."""
    expected = {name.replace(".base_layer", ""): weight.double() for name, weight in base.items()}
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            lora_a, lora_b = module.lora_A["default"].weight, module.lora_B["default"].weight  # (r, in), (out, r)
            delta = lora_b.double() @ lora_a.double() * module.scaling["default"]  # (out, in)
            expected[f"{name.removeprefix('base_model.model.')}.weight"] += delta
    return expected


def check_syncs(trainer, model_dir, dtype=torch.bfloat16, syncs=SYNCS):
    model = trainer.model
    base = {
        name.removeprefix("base_model.model."): parameter.detach().clone()
        for name, parameter in model.named_parameters()
        if "lora_" not in name
    }
    assert {weight.dtype for weight in base.values()} == {dtype}
    rtol = 2**-8 if dtype == torch.bfloat16 else 1e-5  # bf16: rounded once to the nearest bf16
    plain_names = {name for name, _ in AutoModelForCausalLM.from_pretrained(model_dir).named_parameters()}
    generator = torch.Generator().manual_seed(0)
    for sync in range(syncs):
        with torch.no_grad():  # the adapter moves between syncs, as an optimizer step moves it
            for name, parameter in model.named_parameters():
                if "lora_B" in name:
                    noise = torch.randn(parameter.shape, generator=generator) * 0.02  # (out, r)
                    parameter.add_(noise.to(parameter.device))
        trainer.vllm_generation.sync_weights()
        if sync in (0, syncs // 2, syncs - 1):
            for name, parameter in model.named_parameters():
                if "lora_" not in name:  # bit for bit: the KL reference is the model the user loaded
                    reference = base[name.removeprefix("base_model.model.")]
                    assert torch.equal(parameter, reference), f"{name} changed after {sync + 1} syncs"
            received = received_weights(trainer)
            assert set(received) == plain_names  # no base_layer, no lora_ names: the model vLLM loaded
            expected = expected_merged(model, base)
            for name, weight in received.items():
                assert weight.dtype == dtype, name
                torch.testing.assert_close(weight.double(), expected[name].to(weight.device), rtol=rtol, atol=1e-6)
            merged = [name for name in received if name.endswith("proj.weight")]
            assert merged and all(not torch.equal(received[name], base[name.replace(".weight", ".base_layer.weight")])
                                  for name in merged)  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "dtype"), [("colocate", "bfloat16"), ("server", "bfloat16"), ("colocate", "float32")]
)
def test_many_syncs_leave_the_base_weights_bit_identical_and_send_merged_ones(
    tiny_model_dir, small_data, tmp_path, monkeypatch, mode, dtype
):
    trainer = lora_vllm_trainer(tiny_model_dir, small_data["train"], tmp_path, monkeypatch, mode, dtype)
    check_syncs(trainer, tiny_model_dir, getattr(torch, dtype))


def test_a_lora_variant_keeps_trls_sync_and_says_so(tiny_model_dir, small_data, tmp_path, monkeypatch, caplog):
    dora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM", use_dora=True)
    with caplog.at_level(logging.WARNING, logger="grpo_tools.training.vllm_sync"):
        trainer = lora_vllm_trainer(
            tiny_model_dir, small_data["train"], tmp_path, monkeypatch, "colocate", peft_config=dora
        )
    assert "not plain LoRA" in caplog.text and "drift" in caplog.text
    trainer.vllm_generation.sync_weights()  # trl's own sync (merge, send, unmerge) still runs
    assert "model.layers.0.mlp.up_proj.weight" in received_weights(trainer)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_many_syncs_leave_the_base_weights_bit_identical_on_cuda(tiny_model_dir, small_data, tmp_path, monkeypatch):
    trainer = lora_vllm_trainer(
        tiny_model_dir, small_data["train"], tmp_path, monkeypatch, "colocate", use_cpu=False, bf16=True
    )
    assert next(trainer.model.parameters()).device.type == "cuda"
    check_syncs(trainer, tiny_model_dir)


@pytest.fixture
def vllm_starts(monkeypatch):
    """The vLLM engines started in a test (a refusal at start-up comes before any)."""
    started = []
    original = FakeLLM.__init__

    def recording(self, **kwargs):
        started.append(kwargs)
        original(self, **kwargs)

    monkeypatch.setattr(FakeLLM, "__init__", recording)
    return started


def test_a_vllm_run_that_keeps_dropout_is_refused_before_vllm_starts(
    tiny_model_dir, small_data, tmp_path, monkeypatch, vllm_starts
):
    dropout = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    with pytest.raises(ConfigError, match=r"use_vllm with disable_dropout: false .*0\.05.*lora_dropout: 0\.0"):
        lora_vllm_trainer(
            tiny_model_dir, small_data["train"], tmp_path, monkeypatch, "colocate", peft_config=dropout,
            disable_dropout=False,
        )  # fmt: skip
    assert vllm_starts == []


def test_a_lora_bias_where_the_base_layer_has_none_is_refused_before_vllm_starts(
    tiny_model_dir, small_data, tmp_path, monkeypatch, vllm_starts
):
    """vLLM's copy of o_proj has no bias to take the adapter's (peft's own merge raises there): vLLM would sample from
    another policy. On q, k and v, which have a base bias, the adapter's bias reaches vLLM merged."""
    everywhere = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_bias=True, task_type="CAUSAL_LM")
    with pytest.raises(
        ConfigError, match=r"lora_bias on \d+ layers whose base layer has no bias \(model\.layers\.0\."
    ):
        lora_vllm_trainer(
            tiny_model_dir, small_data["train"], tmp_path, monkeypatch, "colocate", peft_config=everywhere
        )
    assert vllm_starts == []
    biased = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_bias=True, task_type="CAUSAL_LM")
    trainer = lora_vllm_trainer(
        tiny_model_dir, small_data["train"], tmp_path, monkeypatch, "colocate", "float32", peft_config=biased
    )
    layer = trainer.model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].bias.fill_(0.5)
    trainer.vllm_generation.sync_weights()
    received = received_weights(trainer)["model.layers.0.self_attn.q_proj.bias"]
    expected = layer.base_layer.bias + 0.5 * layer.scaling["default"]
    torch.testing.assert_close(received, expected)


def test_the_copies_are_bit_identical_to_peft_s_own_merge(tiny_model_dir):
    """What vLLM gets is what trl's in-place merge sent on a base that had not drifted yet: W + delta rounded once."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)  # (out, r)
    ours = dict(merged_weights(peft_model))
    merged = copy.deepcopy(peft_model)
    merged.merge_adapter()
    theirs = {name: parameter for name, parameter in merged.named_parameters() if "lora_" not in name}
    assert ours.keys() == theirs.keys()
    for name, weight in ours.items():
        assert torch.equal(weight, theirs[name]), name


@pytest.mark.parametrize("name", ["_iter_named_params", "_fix_param_name_to_vllm"])
def test_a_trl_whose_vllm_sync_renamed_a_step_is_refused_instead_of_drifting(
    name, tiny_model_dir, small_data, tmp_path, monkeypatch
):
    """The copies replace trl's `_iter_named_params`: renamed in a trl release, the replacement would never be
    called and the in-place merge (and the drift) would come back without a word."""
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.setattr(VLLMGeneration, f"{name}_renamed", getattr(VLLMGeneration, name), raising=False)
    monkeypatch.delattr(VLLMGeneration, name)
    with pytest.raises(ConfigError, match=rf"VLLMGeneration has no method {name}\b"):
        lora_vllm_trainer(tiny_model_dir, small_data["train"], tmp_path, monkeypatch, "colocate")
