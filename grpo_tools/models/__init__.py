"""The models we build offline: the tiny test model and the SmolLM2 conversion, and the provenance record a
conversion writes next to the weights."""

from grpo_tools.models.provenance import Provenance, read_provenance, write_provenance
from grpo_tools.models.tiny import build_tiny_model


__all__ = ["Provenance", "build_tiny_model", "read_provenance", "write_provenance"]
