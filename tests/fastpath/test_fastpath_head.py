"""`grpo_tools.fastpath.head`: the LM head's input made contiguous, the same logits."""

import torch
from transformers import AutoModelForCausalLM


def test_the_lm_head_gets_its_input_contiguous_and_the_same_logits(tiny_model_dir):
    from grpo_tools.fastpath import contiguous_head_input

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    head = model.get_output_embeddings()
    seen = []
    ids = torch.randint(3, model.config.vocab_size, (3, 7))  # (3, 7)
    with torch.no_grad():
        plain = model(ids, logits_to_keep=1).logits  # (3, 1, V): the last position, a strided slice
        handle = contiguous_head_input(model)
        assert contiguous_head_input(model) is None  # once is enough
        head.register_forward_pre_hook(lambda _, args: seen.append(args[0].is_contiguous()))
        hooked = model(ids, logits_to_keep=1).logits  # (3, 1, V)
        handle.remove()
        model(ids, logits_to_keep=1)
    assert seen == [True, False]  # contiguous with the hook, a strided slice again once it is removed
    torch.testing.assert_close(hooked, plain)
    assert contiguous_head_input(model) is not None  # and it can be added again
