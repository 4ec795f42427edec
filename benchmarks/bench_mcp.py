"""What an MCP server costs, as ratios to a baseline run beside it (docs/mcp.md, "Measurements"):

- **a call**: mcp-server-time's `convert_time` through grpo-tools' MCP environment (validation, the SDK's client,
  stdio, the server process and back) against the same conversion called directly in Python (`TimeServer`), calls
  interleaved one by one;
- **a rollout step**: the rollout phase of a `ToolGRPOTrainer` step on the tiny model (8 rollouts, their rewards and
  log-probabilities: trl's `_generate_and_score_completions`), each rollout's first turn scripted to call
  `convert_time`, with the server against the same phase with an in-process environment answering with the same
  function, interleaved. The model's turns are scripted, so the phase's other work is the tiny model's scoring: a
  real model's generation (and the update, left out) makes the server's share smaller.

    .venv/bin/python -m benchmarks.bench_mcp [--calls 200] [--steps 4] [--output benchmarks/results/mcp.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, write_result


ARGUMENTS = {"source_timezone": "Europe/Paris", "time": "14:30", "target_timezone": "Asia/Tokyo"}
SERVER = (str(Path(sys.executable).parent / "mcp-server-time"),)


def _direct() -> Any:
    from mcp_server_time.server import TimeServer

    server = TimeServer()
    return lambda: server.convert_time(ARGUMENTS["source_timezone"], ARGUMENTS["time"], ARGUMENTS["target_timezone"])


def time_calls(calls: int) -> dict[str, Any]:
    """Seconds per call, median over `calls` interleaved calls each way."""
    from grpo_tools.tools.mcp_client import MCPServer
    from grpo_tools.tools.mcp_env import MCPSettings, configure_mcp

    environment = configure_mcp(MCPSettings(MCPServer(command=SERVER)))()
    environment.reset(env={"name": "mcp"})
    direct = _direct()
    through, plain = [], []
    try:
        for _ in range(calls):
            environment.records.clear()  # a rollout's call budget (mcp_max_calls) is not what is measured here
            start = time.perf_counter()
            answer = environment.convert_time(**ARGUMENTS)
            through.append(time.perf_counter() - start)
            start = time.perf_counter()
            direct()
            plain.append(time.perf_counter() - start)
        assert json.loads(answer)["target"]["timezone"] == "Asia/Tokyo", answer
    finally:
        environment._close()
    mcp, python = statistics.median(through), statistics.median(plain)
    return {"mcp_seconds": mcp, "direct_seconds": python, "ratio": mcp / python, "calls": calls}


def _trainer(model_dir: str, environment_factory: Any, rows: list[dict[str, Any]], output_dir: str) -> Any:
    from transformers import AutoTokenizer

    from grpo_tools.tools.trajectories import multi_turn_dataset, outcome_reward
    from grpo_tools.training.configs import ToolGRPOConfig
    from grpo_tools.training.trainer import ToolGRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = ToolGRPOConfig(output_dir=output_dir, use_cpu=True, num_generations=4, per_device_train_batch_size=8,
                            max_completion_length=300, report_to=[], max_steps=1, save_strategy="no",
                            disable_tqdm=True, gradient_checkpointing=False, logging_steps=1)  # fmt: skip
    trainer = ToolGRPOTrainer(model=model_dir, reward_funcs=[outcome_reward], args=config, processing_class=tokenizer,
                              train_dataset=multi_turn_dataset(rows),
                              environment_factory=environment_factory)  # fmt: skip
    call = json.dumps({"name": "convert_time", "arguments": ARGUMENTS})
    turns = [f"<tool_call>\n{call}\n</tool_call><|im_end|>", "It is 22:30 in Tokyo.<|im_end|>"]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        texts = [turns[1] if "<tool_response>" in tokenizer.decode(ids) else turns[0] for ids in prompt_ids]
        return [tokenizer.encode(text, add_special_tokens=False) for text in texts], None

    trainer._generate_single_turn = generate
    return trainer


def time_steps(steps: int, model_dir: str) -> dict[str, Any]:
    """Seconds per scripted rollout phase of a step, median over `steps` interleaved steps each way."""
    from grpo_tools.tools.base import ToolEnvironment
    from grpo_tools.tools.environments import ENVIRONMENTS
    from grpo_tools.tools.mcp_client import MCPServer
    from grpo_tools.tools.mcp_env import MCPSettings, configure_mcp

    class InProcess(ToolEnvironment):
        name = "in-process"

        def convert_time(self, source_timezone: str, time: str, target_timezone: str) -> str:
            """Convert a time between time zones.

            Args:
                source_timezone: IANA name of the zone the time is in.
                time: The time, HH:MM.
                target_timezone: IANA name of the zone to convert to.
            """
            from mcp_server_time.server import TimeServer

            result = TimeServer().convert_time(source_timezone, time, target_timezone)
            return result.model_dump_json(indent=2)

    ENVIRONMENTS[InProcess.name] = InProcess  # rows name their environment through the registry
    mcp_class = configure_mcp(MCPSettings(MCPServer(command=SERVER), tools=("convert_time",)))
    row = {"messages": [{"role": "user", "content": "14:30 in Paris is what time in Tokyo?"}], "category": "multi_turn",
           "answers": [{"name": "convert_time", "arguments": ARGUMENTS}], "expected": "Tokyo"}  # fmt: skip
    rows = {
        "mcp": [{**row, "id": f"m{i}", "tools": mcp_class.tool_schemas(), "env": {"name": "mcp"}} for i in range(2)],
        "direct": [{**row, "id": f"d{i}", "tools": InProcess.tool_schemas(), "env": {"name": "in-process"}}
                   for i in range(2)],
    }  # fmt: skip
    seconds: dict[str, list[float]] = {"mcp": [], "direct": []}
    with tempfile.TemporaryDirectory() as output_dir:
        trainers = {
            "mcp": _trainer(model_dir, mcp_class, rows["mcp"], output_dir),
            "direct": _trainer(model_dir, InProcess, rows["direct"], output_dir),
        }
        from grpo_tools.tools.trajectories import multi_turn_dataset

        batches = {name: multi_turn_dataset(rows[name]) for name in rows}
        for step in range(steps + 1):  # the first step of each starts its servers and warms up: not counted
            for name, trainer in trainers.items():
                trainer.model.train()
                inputs = [batches[name][index % 2] for index in range(8)]
                start = time.perf_counter()
                trainer._generate_and_score_completions(inputs)
                if step:
                    seconds[name].append(time.perf_counter() - start)
        calls = sum(len(environment.records) for environment in trainers["mcp"].environments)
        for environment in trainers["mcp"].environments:
            environment._close()
    assert calls == 8, f"the scripted step made {calls} MCP calls, not one per rollout"
    mcp, python = statistics.median(seconds["mcp"]), statistics.median(seconds["direct"])
    return {"mcp_seconds": mcp, "direct_seconds": python, "ratio": mcp / python, "steps": steps}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--model", default="outputs/tiny-model", help="the tiny model (python -m tasks.tiny_model)")
    parser.add_argument("--output", default=str(RESULTS / "mcp.json"))
    args = parser.parse_args(argv)
    if not Path(args.model, "config.json").is_file():
        from tasks.tiny_model import build_tiny_model

        build_tiny_model(args.model)
    result = {"call": time_calls(args.calls), "step": time_steps(args.steps, args.model)}
    call, step = result["call"], result["step"]
    print(f"one call: through MCP {call['mcp_seconds'] * 1e3:.2f} ms, direct {call['direct_seconds'] * 1e3:.3f} ms: "
          f"{call['ratio']:.0f}x (median of {call['calls']})")  # fmt: skip
    print(f"one step's rollouts (8, one call each, scripted turns): with the server {step['mcp_seconds']:.2f} s, in-process "
          f"{step['direct_seconds']:.2f} s: {step['ratio']:.2f}x (median of {step['steps']})")  # fmt: skip
    print(f"\nwrote {write_result(args.output, result)}")
    return result


if __name__ == "__main__":
    main()
