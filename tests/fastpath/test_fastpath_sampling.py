"""Tests for `grpo_tools.fastpath.sampling`: through `ToolGRPOTrainer`, each prompt is prefilled once and each row
stops at its end of turn, writing the tokens trl's `generate` writes; the inverse-CDF draw follows the tempered
softmax; the preallocated cache layer holds what transformers' growing one holds; with `cpu_fast_path: off`,
`generate` runs as trl calls it; greedy decoding for evaluation writes `generate`'s tokens, with and without an
adapter, and drops each row at its end of turn."""

import math
from functools import partial

import pytest
import torch
from trainer_builders import make_trainer, perturb_adapter

from grpo_tools.fastpath.sampling import PreallocatedLayer, draw, greedy_generate


def test_cpu_generation_prefills_each_prompt_once_and_stops_each_row_at_its_end(tiny_model_dir, small_data, tmp_path):
    from trl import GRPOTrainer

    # A temperature this low samples the most likely token every time: trl's path through `generate` and ours must
    # then write the same tokens, whatever draws each makes.
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, temperature=1e-4, max_completion_length=8)
    tokenizer = trainer.processing_class
    texts = perturb_adapter(trainer)
    prompts = [tokenizer(text, add_special_tokens=False).input_ids for text in texts]
    prompt_ids = [ids for ids in prompts for _ in range(3)]  # two groups of three, left-padded by trl
    longest = max(len(ids) for ids in prompts)
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    embedded = []
    model.get_input_embeddings().register_forward_hook(lambda _, args, __: embedded.append(tuple(args[0].shape)))

    def both():
        samples = []
        for generate in (trainer._generate_single_turn, partial(GRPOTrainer._generate_single_turn, trainer)):
            embedded.clear()
            completions, _ = generate(prompt_ids, None, {}, 3)
            samples.append((completions, list(embedded)))
        return samples

    (ours, our_passes), (trls, trl_passes) = both()
    assert ours == trls and len(ours[0]) == 8
    # Ours: the 2 distinct prompts less their last token once, then the 6 rows from their last prompt token on.
    assert our_passes[:2] == [(2, longest - 1), (6, 1)]
    assert trl_passes[0] == (6, longest)  # trl's: every row's whole prompt

    # With the fourth token of the first prompt's completion as an end of turn, that group ends after 4 tokens and
    # the other goes on without it (unless its completion holds that token too).
    stop = ours[0][3]
    trainer.generation_config.eos_token_id = [*trainer.eos_token_ids, stop]
    trainer.eos_token_ids = [*trainer.eos_token_ids, stop]
    (ours, our_passes), (trls, trl_passes) = both()
    assert ours == trls and ours[0][-1] == stop and len(ours[0]) == 4
    other = next((position for position, token in enumerate(ours[3]) if token == stop), None)
    assert len(ours[3]) == (8 if other is None else other + 1)
    rows_per_step = [shape[0] for shape in our_passes[1:]]
    assert rows_per_step[:4] == [6] * 4 and all(rows < 6 for rows in rows_per_step[4:])  # the first group left
    assert [shape[0] for shape in trl_passes[1:]] == [6] * (len(trl_passes) - 1)  # generate computes every row
    assert "generate" not in vars(model)  # the class's method is back

    embedded.clear()
    trainer._generate_single_turn(prompts, None, {}, 1)  # no prompt shared: generate prefills as usual
    assert embedded[0] == (2, longest)


def test_cpu_sampling_draws_from_the_tempered_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -math.inf, 0.5]]).repeat(20000, 1)  # (20000, 5)
    torch.manual_seed(0)
    drawn = draw(logits, temperature=0.5)  # (20000,)
    frequencies = torch.bincount(drawn, minlength=5).float() / drawn.numel()  # (5,)
    expected = torch.softmax(logits[0] / 0.5, dim=-1)  # (5,)
    torch.testing.assert_close(frequencies, expected, atol=0.01, rtol=0)
    assert frequencies[3] == 0  # a token of probability 0 is never drawn


def test_a_preallocated_cache_layer_holds_what_a_growing_one_holds_and_keeps_its_buffer():
    from transformers.cache_utils import DynamicLayer

    torch.manual_seed(0)
    plain = DynamicLayer()
    plain.update(torch.randn(4, 2, 5, 3), torch.randn(4, 2, 5, 3))  # a prompt of 5 positions
    preallocated = PreallocatedLayer(plain, room=2)
    reference = DynamicLayer()
    reference.update(plain.keys.clone(), plain.values.clone())
    steps = [(torch.randn(4, 2, 1, 3), torch.randn(4, 2, 1, 3)) for _ in range(3)]  # one more than the room
    for step, (keys, values) in enumerate(steps):
        if step == 1:  # rows 0 and 2 end
            for layer in (preallocated, reference):
                layer.batch_select_indices(torch.tensor([1, 3]))
        keys, values = (keys[[1, 3]], values[[1, 3]]) if step >= 1 else (keys, values)
        buffer = preallocated._buffers[0].data_ptr()
        got = preallocated.update(keys, values)
        want = reference.update(keys, values)
        torch.testing.assert_close(got, want, atol=0, rtol=0)
        assert preallocated.get_seq_length() == reference.get_seq_length() == 6 + step
        if step < 2:  # written in place while there is room
            assert preallocated._buffers[0].data_ptr() == buffer
    with pytest.raises(NotImplementedError):  # a method that would leave the buffers behind the views
        preallocated.crop(-1)


def test_with_the_fast_path_off_generate_prefills_every_row(tiny_model_dir, small_data, tmp_path):
    trainer = make_trainer(tiny_model_dir, small_data["train"], tmp_path, max_completion_length=4, cpu_fast_path="off")
    tokenizer = trainer.processing_class
    prompt = tokenizer("Weather in Lyon?", add_special_tokens=False).input_ids
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    embedded = []
    model.get_input_embeddings().register_forward_hook(lambda _, args, __: embedded.append(tuple(args[0].shape)))
    trainer._generate_single_turn([prompt] * 3, None, {}, 3)
    assert embedded[0] == (3, len(prompt))  # one group of three rows, each prefilled whole by `generate`


@pytest.mark.parametrize("with_adapter", [False, True])
def test_greedy_decoding_writes_generates_tokens_and_drops_each_row_at_its_end(
    tiny_model_dir, adapter_dir, with_adapter
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    if with_adapter:  # random LoRA weights: merged while decoding, as the fast path runs an adapter
        model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, padding_side="left")
    texts = ["Convert 50 EUR to JPY, please, right now.", "Weather in Lyon?", "Book a table for two, tonight."]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    prompt_length = batch["input_ids"].size(1)
    embedded = []
    model.get_input_embeddings().register_forward_hook(lambda _, args, __: embedded.append(tuple(args[0].shape)))

    def both(eos_token_id):
        embedded.clear()
        ours = greedy_generate(model, batch["input_ids"], batch["attention_mask"], 8, eos_token_id,
                               tokenizer.pad_token_id)  # fmt: skip
        passes = list(embedded)
        theirs = model.generate(**batch, do_sample=False, max_new_tokens=8, eos_token_id=eos_token_id,
                                pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        return ours, theirs, passes

    ours, theirs, passes = both(tokenizer.eos_token_id)
    torch.testing.assert_close(ours, theirs, atol=0, rtol=0)
    assert ours.size(1) == prompt_length + 8
    assert passes[0] == (3, prompt_length - 1)  # every prompt less its last token, in one pass

    # With a token of the first row's completion as an end of turn, that row ends where it first writes it (and pads
    # after), as with `generate`, and leaves the batch: the passes after it compute fewer rows.
    first_completion = ours[0, prompt_length:].tolist()
    stop = first_completion[2]
    end = first_completion.index(stop) + 1  # the tokens the first row writes
    ours, theirs, passes = both([tokenizer.eos_token_id, stop])
    torch.testing.assert_close(ours, theirs, atol=0, rtol=0)
    assert ours[0, prompt_length : prompt_length + end].tolist() == first_completion[:end]
    assert (ours[0, prompt_length + end :] == tokenizer.pad_token_id).all()
    # Each decoding pass computes the rows that have not yet written an end of turn (another row may write `stop` too).
    ends = []
    for row in theirs[:, prompt_length:].tolist():
        written = [position for position, token in enumerate(row) if token in (tokenizer.eos_token_id, stop)]
        ends.append(written[0] + 1 if written else len(row))
    assert ends[0] == end and min(ends) < max(ends)  # some row goes on after another has ended
    assert [shape[0] for shape in passes[1:]] == [sum(e > step for e in ends) for step in range(max(ends))]
