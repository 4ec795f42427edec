"""The models we build offline: the tiny test model and the SmolLM2 conversion, the provenance record a conversion
writes next to the weights, and a warm start's LoRA adapter stacked with GRPO's into one on the base model."""

from grpo_tools.models.adapters import BASE_ADAPTER_DIR, WARM_ADAPTER_DIR, StackError, stack_lora_adapters
from grpo_tools.models.provenance import Provenance, read_provenance, write_provenance
from grpo_tools.models.tiny import build_tiny_model


__all__ = [
    "BASE_ADAPTER_DIR",
    "WARM_ADAPTER_DIR",
    "Provenance",
    "StackError",
    "build_tiny_model",
    "read_provenance",
    "stack_lora_adapters",
    "write_provenance",
]
