"""A tiny offline causal LM with a tool-calling chat template, for tests, smoke runs and CPU demos.

`build_tiny_model` trains a small byte-level BPE tokenizer on the bundled synthetic data (single-turn rows and
multi-turn trajectories) rendered through the chat template, sets a Hermes/Qwen2.5-style template and a response
template (for `tokenizer.parse_response`), and saves a randomly initialised Qwen2 model next to it. Nothing is downloaded; the whole build takes seconds on a CPU.

    python -m tasks.tiny_model --out outputs/tiny
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast


__all__ = [
    "CHAT_TEMPLATE",
    "RESPONSE_TEMPLATE",
    "SPECIAL_TOKENS",
    "TOOL_TOKENS",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "default_corpus",
    "main",
]

logger = logging.getLogger(__name__)

# `<|endoftext|>` is the padding token, `<|im_end|>` ends every turn (and so is the EOS token).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Added but not special: they must survive `decode(..., skip_special_tokens=True)`, which is how trl decodes
# completions before the reward functions parse the calls out of them.
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
DEFAULT_VOCAB_SIZE = 1024
MAX_POSITIONS = 1024
# Qwen2's pre-tokenizer split: words with one leading space or punctuation mark, digits one by one, runs of
# punctuation, newlines. AutoTokenizer loads any qwen2 checkpoint through `Qwen2Tokenizer`, which rebuilds exactly
# this split whatever tokenizer.json says, so the tokenizer must use it too.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The merges are learned on a finer split, where a word never carries the space or quote before it, so no merge
# joins them (on the ASCII text of the bundled data): `Rome` in "weather in Rome" and in `{"city": "Rome"}` is then
# the same token under `_SPLIT_PATTERN` too. Filling an argument becomes a plain copy, one circuit for every value
# that carries over to values never seen in that slot, instead of a learned mapping from ` Rome` to `"Rome`.
_TRAIN_SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# Hermes / Qwen2.5-style calls. Tools are listed one signature a line (`get_weather(city: string, unit: celsius|
# fahrenheit)`) rather than as JSON schemas: everything the model needs, in a third of the tokens, which is what makes
# training on two CPU cores take minutes rather than an hour. Two choices keep it prefix-preserving, which trl's multi-turn tool loop needs: every tool
# message is its own user turn (grouping consecutive tool messages would rewrite the previous one's closing tag),
# and an assistant turn is exactly the generation prompt followed by what the model writes. `{% generation %}` marks
# what the assistant writes, end-of-turn token included, for SFT's assistant-only loss.
CHAT_TEMPLATE = """\
{%- if messages and messages[0].role == "system" -%}
    {%- set system_message = messages[0].content -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set system_message = "" if tools else "You are a helpful assistant." -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{{- "<|im_start|>system\\n" + system_message -}}
{%- if tools -%}
    {{- ("\\n\\n" if system_message else "") + "# Tools\\n<tools>" -}}
    {%- for tool in tools -%}
        {%- set function = tool.function if tool.function is defined else tool -%}
        {%- set parameters = function.parameters.properties if function.parameters is defined and function.parameters.properties is defined else {} -%}
        {{- "\\n" + function.name + "(" -}}
        {%- for name, spec in parameters.items() -%}
            {{- (", " if not loop.first else "") + name + ": " -}}
            {%- if spec.enum is defined -%}
                {{- spec.enum | join("|") -}}
            {%- else -%}
                {{- spec.type if spec.type is string else "any" -}}
            {%- endif -%}
        {%- endfor -%}
        {{- ")" -}}
    {%- endfor -%}
    {{- "\\n</tools>" -}}
{%- endif -%}
{{- "<|im_end|>\\n" -}}
{%- for message in loop_messages -%}
    {%- if message.role == "assistant" -%}
        {{- "<|im_start|>assistant\\n" -}}
        {%- generation -%}
        {%- if message.content -%}
            {{- message.content -}}
        {%- endif -%}
        {%- for tool_call in message.tool_calls or [] -%}
            {%- set call = tool_call.function if tool_call.function is defined else tool_call -%}
            {%- if message.content or not loop.first -%}
                {{- "\\n" -}}
            {%- endif -%}
            {{- '<tool_call>\\n{"name": ' + (call.name | tojson) + ', "arguments": ' -}}
            {%- if call.arguments is string -%}
                {{- call.arguments -}}
            {%- else -%}
                {{- call.arguments | tojson -}}
            {%- endif -%}
            {{- "}\\n</tool_call>" -}}
        {%- endfor -%}
        {{- "<|im_end|>" -}}
        {%- endgeneration -%}
        {{- "\\n" -}}
    {%- elif message.role == "tool" -%}
        {%- set response = message.content if message.content is string else message.content | tojson -%}
        {{- "<|im_start|>user\\n<tool_response>\\n" + response + "\\n</tool_response><|im_end|>\\n" -}}
    {%- elif message.role in ["user", "system"] -%}
        {{- "<|im_start|>" + message.role + "\\n" + message.content + "<|im_end|>\\n" -}}
    {%- else -%}
        {{- raise_exception("Unknown role: " + message.role) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\\n" -}}
{%- endif -%}
"""

# For `tokenizer.parse_response(text, prefix=prompt)` (transformers >= 5.13 calls it a response *template*; the
# older `response_schema` is dropped on load). Same layout trl uses for Qwen3, without the reasoning block.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant", "content": ""},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def default_corpus() -> list[str]:
    """The bundled train splits rendered through `CHAT_TEMPLATE`: each single-turn row with its gold assistant turn,
    then each multi-turn row with its gold trajectory (calls, the tools' real results, the final answer).

    This is what the tokenizer learns its merges from, so JSON punctuation, tool names and argument names become
    single tokens. The rows are regenerated in memory (identical to `data/tool_calls_train.jsonl` and
    `data/multi_turn_train.jsonl`), so building does not depend on the working directory. The multi-turn texts
    came second and leave the segmentation of every single-turn text unchanged (`tests/models/test_tiny.py` checks it); they
    add the words of the multi-turn task (its tools, units, events, answers) as tokens.
    """
    from transformers.utils.chat_template_utils import render_jinja_template

    from grpo_tools.data.prompts import gold_message
    from grpo_tools.tools.trajectories import gold_trajectory
    from tasks import multiturn, synthetic

    conversations = [
        ([*row["messages"], gold_message(row)], row["tools"])
        for row in synthetic.generate_rows("train", synthetic.BUNDLED_ROWS["train"], synthetic.BUNDLED_SEED)
    ]
    conversations += [
        ([*row["messages"], *gold_trajectory(row)], row["tools"])
        for row in multiturn.generate_rows("train", multiturn.BUNDLED_ROWS["train"], multiturn.BUNDLED_SEED)
    ]
    texts = []
    for messages, tools in conversations:
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=CHAT_TEMPLATE)
        texts.append(rendered[0])
    return texts


def _without_control_tokens(corpus: Iterable[str]) -> Iterator[str]:
    """The text between special and tool tokens: they are matched before BPE runs, so merges must not span them."""
    pattern = re.compile("|".join(re.escape(token) for token in (*SPECIAL_TOKENS, *TOOL_TOKENS)))
    for text in corpus:
        yield from (piece for piece in pattern.split(text) if piece)


def _pre_tokenizer(pattern: str) -> Any:
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def build_tiny_tokenizer(
    corpus: Iterable[str] | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer of at most `vocab_size` tokens (tool tokens included), wrapped for transformers.

    The result carries `CHAT_TEMPLATE`, `RESPONSE_TEMPLATE`, `<|im_end|>` as EOS and `<|endoftext|>` as padding.
    `corpus` defaults to `default_corpus()`.
    """
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    num_base = vocab_size - len(TOOL_TOKENS)
    if num_base <= 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must leave room for the 256 bytes and the special tokens, got {vocab_size}")
    # The same pipeline `Qwen2Tokenizer` rebuilds on load (NFC, byte-level, `_SPLIT_PATTERN`), so the tokenizer
    # saved here and the one AutoTokenizer loads encode alike.
    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=num_base,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.pre_tokenizer = _pre_tokenizer(_TRAIN_SPLIT_PATTERN)
    backend.train_from_iterator(_without_control_tokens(default_corpus() if corpus is None else corpus), trainer)
    backend.pre_tokenizer = _pre_tokenizer(_SPLIT_PATTERN)
    backend.add_tokens([AddedToken(token, special=False, normalized=False) for token in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        response_template=RESPONSE_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_model(
    output_dir: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    corpus: Iterable[str] | None = None,
) -> Path:
    """Build the tiny tool-calling model and its tokenizer offline and save both into `output_dir`.

    A Qwen2 decoder (hidden size 128, 4 layers, 4 heads, tied embeddings, about 1M parameters) initialised at random
    from `seed`, saved as safetensors with `save_pretrained`. `corpus` (texts) is what the tokenizer is trained on;
    by default the bundled train split rendered through the chat template. Load it back with
    `AutoModelForCausalLM.from_pretrained(output_dir)` and `AutoTokenizer.from_pretrained(output_dir)`.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    start = time.perf_counter()
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=vocab_size)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    # Fork the RNG so the seed fixes the weights without changing the caller's global torch random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    logger.info(
        "Built tiny model (%d parameters, vocab %d) in %s in %.1f s",
        model.num_parameters(),
        len(tokenizer),
        output_dir,
        time.perf_counter() - start,
    )
    return output_dir


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `python -m tasks.tiny_model --out DIR` builds the tiny model into DIR."""
    parser = argparse.ArgumentParser(prog="python -m tasks.tiny_model", description=main.__doc__)
    parser.add_argument("--out", required=True, help="Directory to save the model and tokenizer into.")
    parser.add_argument("--seed", type=int, default=0, help="Seed for the random weights (default: 0).")
    parser.add_argument(
        "--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help=f"Tokenizer size (default: {DEFAULT_VOCAB_SIZE})."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(build_tiny_model(args.out, seed=args.seed, vocab_size=args.vocab_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
