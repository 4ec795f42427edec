"""Reading a source dataset: a local .json, .jsonl or .parquet file, or a Hugging Face dataset."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError, read_jsonl


def _read_json(path: Path) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """A JSON array of rows, or JSONL under a .json name (as BFCL writes its files)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    if not head.startswith(b"["):
        return read_jsonl(path)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    return (
        (number, row if isinstance(row, dict) else DataError(f"expected an object, got {type(row).__name__}"))
        for number, row in enumerate(rows, start=1)
    )


def _read_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    import pyarrow.parquet as parquet

    try:
        reader = parquet.ParquetFile(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: not a readable Parquet file ({error})") from None

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        number = 0
        try:
            for batch in reader.iter_batches():
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
        except (OSError, ValueError) as error:
            raise DataError(f"{path}: unreadable after row {number} ({error})") from None

    return rows()


def _read_hub(name: str, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    import datasets

    try:
        dataset = datasets.load_dataset(name, split=split)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
        raise DataError(f"{name}: not a local file, and not loadable as a Hugging Face dataset ({error})") from None
    return ((number, dict(row)) for number, row in enumerate(dataset, start=1))


def read_source(source: str, split: str = "train") -> Iterator[tuple[int, dict[str, Any] | DataError]]:
    """Stream a source dataset as `(row number, row)` pairs: a local .json (array or JSONL), .jsonl or .parquet
    file, or else a Hugging Face dataset name loaded with `datasets.load_dataset(source, split=split)`.

    A missing or unreadable file raises `DataError` naming it; a line that is not a JSON object comes back as a
    `DataError` in place of its row.
    """
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl", ".parquet") and not path.exists():
        raise DataError(f"{source}: no such file")
    if path.is_file():
        if suffix == ".jsonl":
            return read_jsonl(path)
        if suffix == ".json":
            return _read_json(path)
        if suffix == ".parquet":
            return _read_parquet(path)
        raise DataError(f"{source}: unsupported file type {suffix or '(none)'}; expected .json, .jsonl or .parquet")
    return _read_hub(source, split)
