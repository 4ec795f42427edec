#!/usr/bin/env bash
# The GPU checks of docs/gpu.md, for one machine with a CUDA GPU and the project's dependencies installed: the GPU
# tests (one GRPO step with LoRA, bf16 and adaptive KL; 200 vLLM weight syncs on CUDA in bf16 with the base weights
# checked bit for bit; the vLLM step where vLLM is installed), then two GRPO steps of the SmolLM2 BFCL recipe on the
# GPU in bf16 after its warm start, judged on 40 held-out rows; where DeepSpeed is installed, one GRPO step under
# ZeRO-3 (zero3_init_flag: the model loads partitioned) with the evaluation before and after on gathered weights.
# Logs go to $OUT (default outputs/gpu-checks).
# Usage, from the repository root: bash benchmarks/gpu_checks.sh
set -uo pipefail
out=${OUT:-outputs/gpu-checks}
mkdir -p "$out"
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" | tee "$out/device.txt" || exit 2
python3 -c "import vllm" 2>/dev/null || echo "vLLM is not installed: its test is skipped" | tee -a "$out/device.txt"
status=0
python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests 2>&1 | tee "$out/pytest-gpu.log" || status=1
test -f outputs/smollm2-135m/config.json || python3 -m tasks.smollm2 --out outputs/smollm2-135m
test -f outputs/bfcl-task/manifest.json ||
    python3 -m tasks.bfcl --tokenizer outputs/smollm2-135m --out outputs/bfcl-task
rm -rf outputs/gpu-bfcl
python3 -m grpo_tools.cli train --config recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml --use_cpu false --bf16 true \
    --max_steps 2 --max_eval_rows 40 --output_dir outputs/gpu-bfcl --disable_tqdm true 2>&1 | tee "$out/train.log" ||
    status=1
if python3 -c "import deepspeed" 2>/dev/null; then
    rm -rf outputs/gpu-zero3
    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml --num_processes 1 -m grpo_tools.cli train \
        --config recipes/SmolLM2-135M-Instruct/grpo/bfcl.yaml --use_cpu false --bf16 true --warmup_sft_epochs 0 \
        --max_steps 1 --max_eval_rows 16 --output_dir outputs/gpu-zero3 --disable_tqdm true 2>&1 |
        tee "$out/zero3.log" || status=1
    # Both reports written, from completions of whole weights (a partitioned model raises before any is written)
    test -s outputs/gpu-zero3/before_report.json && test -s outputs/gpu-zero3/after_report.json || status=1
else
    echo "DeepSpeed is not installed: the ZeRO-3 check is skipped" | tee -a "$out/device.txt"
fi
exit $status
