"""Models: loading a model's folder with one clear message when it is none (`loading`), the provenance record of a
base converted or copied locally rather than taken from the Hub (`provenance`: read by the model card, written by a
conversion), and a warm start's LoRA adapter stacked with GRPO's into one on the base model (`adapters`)."""

from grpo_tools.models.adapters import BASE_ADAPTER_DIR, WARM_ADAPTER_DIR, StackError, stack_lora_adapters
from grpo_tools.models.loading import check_model_folder, load_tokenizer
from grpo_tools.models.provenance import Provenance, read_provenance, write_provenance


__all__ = [
    "BASE_ADAPTER_DIR",
    "WARM_ADAPTER_DIR",
    "Provenance",
    "StackError",
    "check_model_folder",
    "load_tokenizer",
    "read_provenance",
    "stack_lora_adapters",
    "write_provenance",
]
