"""Loading a model's folder: one clear message for a name that is neither a model folder here nor a model on the
Hugging Face Hub, before transformers gives its own (a `model_type` error, or advice to check the connection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


__all__ = ["TOKENIZER_FILES", "check_model_folder", "load_tokenizer"]


TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")  # a folder with neither holds no tokenizer to load


def check_model_folder(name: str) -> None:
    """Raise one `OSError` naming NAME when it is a file, or a folder here without the `config.json` every transformers
    model folder has (transformers raises a `ValueError` about `model_type` for it, after the tokenizer loaded). A
    name that is no folder here is left to `load_tokenizer`, since it may be a Hub id."""
    path = Path(name).expanduser()
    if path.is_file():
        raise OSError(f"{name}: a file, not a model folder")
    if path.is_dir() and not (path / "config.json").is_file():
        raise OSError(f"{name}: not a model folder (no config.json in it)")


def load_tokenizer(name: str, **kwargs: Any) -> Any:
    """`AutoTokenizer.from_pretrained(name, **kwargs)`, with one `OSError` naming NAME when it holds no tokenizer.

    For a missing folder, transformers tells the user to check the internet connection. Here the message says "no such
    folder", with the Hub's reason when NAME could be a Hub id (`owner/model`) and alone when it could not (`/...`,
    `./...`, `~/...`, two slashes or more). A file, or a folder without a tokenizer file (where transformers raises a
    `ValueError` about converting slow tokenizers), is "not a model folder".
    """
    from transformers import AutoTokenizer

    path = Path(name).expanduser()
    if path.is_file():
        raise OSError(f"{name}: a file, not a model folder")
    if path.is_dir() and not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise OSError(f"{name}: not a model folder (no {' or '.join(TOKENIZER_FILES)} in it)")
    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except OSError as error:
        if path.exists():
            raise
        if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path: no Hub id looks like it
            raise OSError(f"{name}: no such folder") from error
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise OSError(f"{name}: no such folder, and the Hugging Face Hub could not give it ({reason})") from error
