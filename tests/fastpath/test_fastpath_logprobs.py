"""Tests for `grpo_tools.fastpath.logprobs` through `ToolGRPOTrainer`: log-probabilities, entropies and their
gradients equal trl's (`GRPOTrainer._get_per_token_logps_and_entropies`) with the LM head over completion positions
only, a group's prompt run once, logits scored a row at a time, batches too large to hold left to trl, and with
`cpu_fast_path: off` trl's own computation."""

from functools import partial

import torch
from trainer_builders import make_trainer, perturb_adapter

from grpo_tools.fastpath import logprobs


def test_cpu_log_probabilities_equal_trls_with_completion_positions_only(tiny_model_dir, small_data, tmp_path):
    from trl import GRPOTrainer

    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, temperature=0.7)
    with torch.no_grad():
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)  # an adapter that changes the outputs, so its gradients are not trivial
    tokenizer = trainer.processing_class
    texts = ["Weather in Lyon?", "Convert 50 EUR to JPY, please, right now."]
    prompt = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")  # (2, P), left-padded
    completion_ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])  # (2, 5); the second row ends early
    completion_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    input_ids = torch.cat([prompt.input_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt.attention_mask, completion_mask], dim=1)
    adapter = [parameter for name, parameter in trainer.model.named_parameters() if "lora_" in name]

    projected = []  # positions the LM head module projects, per call (trl's fused head reads its weight directly)
    trainer.model.get_output_embeddings().register_forward_hook(lambda _, args, __: projected.append(args[0].size(1)))
    results = []
    for compute in (
        trainer._get_per_token_logps_and_entropies,
        partial(GRPOTrainer._get_per_token_logps_and_entropies, trainer),
    ):
        logps, entropies, _ = compute(trainer.model, input_ids, attention_mask, 5, batch_size=1, compute_entropy=True)
        grads = torch.autograd.grad((logps * completion_mask).sum(), adapter)
        results.append((logps, entropies, grads))
    assert projected == [6, 6]  # ours: the 5 completion positions and the one before them, for each of the 2 rows
    (ours, our_entropy, our_grads), (trls, trl_entropy, trl_grads) = results
    assert ours.shape == trls.shape == (2, 5)
    torch.testing.assert_close(ours, trls, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(our_entropy, trl_entropy, atol=1e-5, rtol=1e-4)
    for our_grad, trl_grad in zip(our_grads, trl_grads, strict=True):
        # trl's fused head sums in float32 in another order: an absolute tolerance in units of the largest entry (up
        # to about 30 here), since a fixed 1e-5 was missed by 1.3e-5 on one entry of 1,024 from transformers 5.24 on.
        scale = max(1.0, trl_grad.abs().max().item())
        torch.testing.assert_close(our_grad, trl_grad, atol=1e-5 * scale, rtol=1e-4)
    assert (ours[1, 3:] == 0).all() and (ours[0] < 0).all()  # padding scores 0, real tokens a log-probability
    assert not our_entropy.requires_grad  # no entropy bonus: nothing differentiates it
    trainer._entropy_bonus_enabled = True  # trl's `entropy_coef` > 0: the bonus's gradient goes through the entropy
    entropy_grads = []
    for compute in (
        trainer._get_per_token_logps_and_entropies,
        partial(GRPOTrainer._get_per_token_logps_and_entropies, trainer),
    ):
        _, entropies, _ = compute(trainer.model, input_ids, attention_mask, 5, batch_size=1, compute_entropy=True)
        entropy_grads.append(torch.autograd.grad((entropies * completion_mask).sum(), adapter))
    for our_grad, trl_grad in zip(*entropy_grads, strict=True):
        scale = max(1.0, trl_grad.abs().max().item())
        torch.testing.assert_close(our_grad, trl_grad, atol=1e-5 * scale, rtol=1e-4)


def test_cpu_log_probabilities_taken_a_row_at_a_time_equal_the_whole_batchs(
    tiny_model_dir, small_data, tmp_path, monkeypatch
):
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, temperature=0.7)
    perturb_adapter(trainer)
    trainer._entropy_bonus_enabled = True  # so that the entropies' gradients are compared as well
    input_ids = torch.randint(3, 50, (4, 12))  # 4 rows, the last 5 tokens the completion
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, -2:] = 0  # a completion that ended early
    adapter = [parameter for name, parameter in trainer.model.named_parameters() if "lora_" in name]
    results = []
    for piece_bytes in (logprobs.LOGITS_PIECE_BYTES, 1):  # the whole batch at once, then a row at a time
        monkeypatch.setattr(logprobs, "LOGITS_PIECE_BYTES", piece_bytes)
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, 5, compute_entropy=True
        )
        loss = (logps * attention_mask[:, -5:]).sum() + entropies.sum()
        results.append((logps, entropies, torch.autograd.grad(loss, adapter)))
    (whole, whole_entropy, whole_grads), (rows, row_entropy, row_grads) = results
    assert whole.shape == rows.shape == (4, 5)
    assert torch.equal(whole, rows) and torch.equal(whole_entropy, row_entropy)
    assert (rows[1, -2:] == 0).all() and (row_entropy[1, -2:] == 0).all()  # padding scores 0
    assert all(torch.equal(whole_grad, row_grad) for whole_grad, row_grad in zip(whole_grads, row_grads, strict=True))


def test_cpu_log_probabilities_share_each_prompts_forward_pass_among_its_completions(
    tiny_model_dir, small_data, tmp_path
):
    from trl import GRPOTrainer

    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, temperature=0.7)
    tokenizer = trainer.processing_class
    texts = perturb_adapter(trainer)
    prompt = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")  # (2, P), left-padded
    prompt_ids = prompt.input_ids.repeat_interleave(3, dim=0)  # (6, P): two groups of three completions
    prompt_mask = prompt.attention_mask.repeat_interleave(3, dim=0)
    completion_ids = torch.tensor([[5, 6, 7, 8, 9], [9, 8, 7, 0, 0], [4, 0, 0, 0, 0]]).repeat(2, 1)  # (6, 5)
    completion_mask = (completion_ids != 0).long()
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    adapter = [parameter for name, parameter in trainer.model.named_parameters() if "lora_" in name]

    projected = []
    trainer.model.get_output_embeddings().register_forward_hook(
        lambda _, args, __: projected.append(tuple(args[0].shape[:2]))
    )
    results = []
    for compute in (
        trainer._get_per_token_logps_and_entropies,
        partial(GRPOTrainer._get_per_token_logps_and_entropies, trainer),
    ):
        logps, entropies, _ = compute(trainer.model, input_ids, attention_mask, 5, compute_entropy=True)
        grads = torch.autograd.grad((logps * completion_mask).sum(), adapter)
        results.append((logps, entropies, grads))
    # The 2 distinct prompts ran once, for the first completion token; then the 6 rows' other 4 positions.
    assert projected == [(2, 1), (6, 4)]
    (ours, our_entropy, our_grads), (trls, trl_entropy, trl_grads) = results
    torch.testing.assert_close(ours, trls, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(our_entropy, trl_entropy, atol=1e-5, rtol=1e-4)
    for our_grad, trl_grad in zip(our_grads, trl_grads, strict=True):
        # Float rounding differs with the order of the sums: 1e-4 of each gradient's scale (on a float64 model the two
        # agree to 2e-7 of it, the float32 of the log-softmax).
        torch.testing.assert_close(our_grad, trl_grad, atol=1e-4 * trl_grad.abs().max().item(), rtol=1e-4)
    assert (ours[1, 3:] == 0).all() and (ours[2, 1:] == 0).all() and (ours[0] < 0).all()

    trainer.args.gradient_checkpointing = True  # which turns the cache off: whole rows, in one pass
    projected.clear()
    checkpointed, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, 5)
    assert projected == [(6, 6)]
    torch.testing.assert_close(checkpointed, trls, atol=1e-5, rtol=1e-4)


def test_cpu_log_probabilities_too_large_to_hold_are_left_to_trl(tiny_model_dir, small_data, tmp_path, monkeypatch):
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path)
    vocab = trainer.model.config.get_text_config().vocab_size
    projected = []
    trainer.model.get_output_embeddings().register_forward_hook(lambda _, args, __: projected.append(args[0].size(1)))
    input_ids = torch.randint(3, vocab, (4, 12))  # 4 rows, the last 5 tokens the completion
    attention_mask = torch.ones_like(input_ids)
    monkeypatch.setattr(logprobs, "MAX_CPU_LOGITS", 4 * 6 * vocab)  # exactly what this batch needs: ours
    ours, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, 5)
    assert projected == [6]
    monkeypatch.setattr(logprobs, "MAX_CPU_LOGITS", 4 * 6 * vocab - 1)  # one short: trl's fused head
    trls, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, 5)
    assert projected == [6]  # the module was not called again
    torch.testing.assert_close(ours, trls, atol=1e-5, rtol=1e-4)


def test_with_the_fast_path_off_trls_own_computation_runs(tiny_model_dir, small_data, tmp_path):
    from trl import GRPOTrainer

    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, temperature=0.7, cpu_fast_path="off")
    assert not trainer.cpu_fast_path
    perturb_adapter(trainer)
    input_ids = torch.randint(3, 50, (4, 12))  # (4, 12): 4 rows, the last 5 tokens the completion
    attention_mask = torch.ones_like(input_ids)
    projected = []
    trainer.model.get_output_embeddings().register_forward_hook(lambda _, args, __: projected.append(args[0].size(1)))
    with torch.no_grad():
        ours, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, 5)
        trls, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, input_ids, attention_mask, 5
        )
    assert projected == []  # trl's fused head reads the weight itself: the head module never runs
    assert torch.equal(ours, trls)


def test_cpu_log_probability_gradients_repeat_bit_for_bit_on_several_threads():
    # A GRPO batch as trl shuffles it, each prompt's completions spread over the batch, so that two threads add
    # gradients into the same prompt's cache rows. Sizes above the grain at which torch splits an operation between
    # threads (32,768 elements): a key/value cache of 32 x 2 x 48 x 16 per layer and logits of 32 x 4,096.
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    prompts = torch.randint(3, 4096, (8, 48)).repeat(4, 1)  # (32, 48): prompt i in rows i, i + 8, i + 16, i + 24
    input_ids = torch.cat([prompts, torch.randint(3, 4096, (32, 6))], dim=1)  # (32, 54)
    attention_mask = torch.ones_like(input_ids)
    weights = torch.randn(32, 6, 4096)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gradients = []
        for _ in range(8):
            blocks = logprobs.completion_logits(model, input_ids, attention_mask, 6)
            assert [tuple(block.shape) for block in blocks] == [(32, 1, 4096), (32, 5, 4096)]  # the prompts shared
            loss = (torch.cat(blocks, dim=1) * weights).sum()
            gradients.append(torch.autograd.grad(loss, list(model.parameters())))
    finally:
        torch.set_num_threads(threads)
    for repeat in gradients[1:]:
        assert all(torch.equal(first, again) for first, again in zip(gradients[0], repeat, strict=True))
