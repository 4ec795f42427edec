"""Two LoRA adapters stacked into one: a warm start's and GRPO's, as one adapter on the model training started from.

A warm start trained with LoRA is merged into a copy of the base model (`output_dir/warmup`), and GRPO trains its own
adapter on that copy, a model users cannot get from the Hub. Two LoRA updates of the same weight add up: with
scalings s1 and s2, s1 B1 A1 + s2 B2 A2 = [s1 B1, s2 B2] [A1; A2], which is one LoRA update of rank r1 + r2 at
scaling 1. So the stacked adapter gives, on the base model itself, the warm-started model with GRPO's adapter, up to
float rounding, and plain peft loads it there. `grpo-tools train` writes it to `output_dir/base_adapter` after a
LoRA warm start, and `grpo-tools push` publishes it in place of the adapter that needs the warm-started copy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


__all__ = ["BASE_ADAPTER_DIR", "WARM_ADAPTER_DIR", "StackError", "stack_lora_adapters"]

# In a run's output_dir: the stacked adapter; in its warm-started folder: the warm start's own adapter.
BASE_ADAPTER_DIR = "base_adapter"
WARM_ADAPTER_DIR = "lora"

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


class StackError(ValueError):
    """Two adapters that cannot be written as one LoRA adapter: the message says which setting stands in the way."""


def _scaling(config: dict[str, Any]) -> float:
    # peft's LoraLayer: lora_alpha / r, or lora_alpha / sqrt(r) with rank-stabilized LoRA (Kalajdzievski, 2023).
    rank = config["r"]
    return config["lora_alpha"] / (rank**0.5 if config.get("use_rslora") else rank)


def _check(config: dict[str, Any], folder: Path) -> None:
    if config.get("peft_type") != "LORA":
        raise StackError(f"{folder}: a {config.get('peft_type')} adapter, not LoRA")
    for field in ("use_dora", "modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform"):
        if config.get(field):
            raise StackError(f"{folder}: {field} is set, which a stacked adapter cannot carry")
    if config.get("bias", "none") != "none" or config.get("fan_in_fan_out"):
        raise StackError(f"{folder}: bias or fan_in_fan_out is set, which a stacked adapter cannot carry")


def stack_lora_adapters(
    first: str | os.PathLike[str], second: str | os.PathLike[str], out: str | os.PathLike[str]
) -> str:
    """Write to `out` one LoRA adapter whose update is `first`'s plus `second`'s, on `first`'s base model (`second`
    was trained on `first` merged into that base). Returns that base. Raises `StackError` when the two adapters do not
    adapt the same modules in the same way."""
    import torch
    from safetensors.torch import load_file, save_file

    first, second, out = Path(first), Path(second), Path(out)
    configs = [json.loads((folder / CONFIG).read_text()) for folder in (first, second)]
    for config, folder in zip(configs, (first, second), strict=True):
        _check(config, folder)
    weights = [load_file(folder / WEIGHTS) for folder in (first, second)]
    if set(weights[0]) != set(weights[1]):
        raise StackError(f"{first} and {second} adapt different modules")
    stacked = {}
    for name in weights[0]:
        if ".lora_A." in name:
            stacked[name] = torch.cat([weights[0][name], weights[1][name]], dim=0).contiguous()
        elif ".lora_B." in name:
            parts = [
                tensor * _scaling(config)
                for tensor, config in zip((weights[0][name], weights[1][name]), configs, strict=True)
            ]
            stacked[name] = torch.cat(parts, dim=1).contiguous()
        else:
            raise StackError(f"{first}: {name} is not a LoRA A or B matrix")
    rank = configs[0]["r"] + configs[1]["r"]
    base = configs[0].get("base_model_name_or_path")
    config = {**configs[1], "r": rank, "lora_alpha": rank, "use_rslora": False, "base_model_name_or_path": base}
    out.mkdir(parents=True, exist_ok=True)
    save_file(stacked, out / WEIGHTS, metadata={"format": "pt"})
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return base
