"""Tests of a run over two nodes that share no disk, played on one machine: two `torchrun --nnodes 2` launches of one
process each over gloo, each node's run folder its own (tests/scripts/distributed_scenarios.py, `NODE_SCENARIOS`).
The node that cannot see the warm start the main process wrote stops both processes with one message saying what to
do, rather than failing alone while the other waits for it in the next collective."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


SCRIPT = Path(__file__).parents[1] / "scripts" / "distributed_scenarios.py"
LAUNCH_TIMEOUT = 300  # seconds; the scenario takes under a minute on 2 loaded cores


@pytest.fixture(scope="module")
def nodes(tiny_model_dir, small_data, tmp_path_factory):
    """The scenario, once, on both nodes; returns `results(name)`: each process's result."""
    out = tmp_path_factory.mktemp("nodes")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scenarios = ["nodes_on_own_disks"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
               "--master_addr", "127.0.0.1", "--master_port", str(port)]  # fmt: skip
    arguments = [str(SCRIPT), tiny_model_dir, small_data["train"], small_data["eval"], str(out), *scenarios]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    launches = [
        subprocess.Popen(
            [*command, "--node_rank", str(node), *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
        )
        for node in (0, 1)
    ]
    logs = []
    for launch in launches:
        try:
            logs.append(launch.communicate(timeout=LAUNCH_TIMEOUT)[0])
        except subprocess.TimeoutExpired:
            for other in launches:
                other.terminate()
            logs.append(launch.communicate()[0] + f"\n(the launch hung and was ended after {LAUNCH_TIMEOUT} s)")

    def results(name):
        paths = [out / f"{name}.rank{rank}.json" for rank in (0, 1)]
        missing = [path.name for path in paths if not path.is_file()]
        assert not missing, f"no result {missing}:\n" + "\n".join(log[-3000:] for log in logs)
        return [json.loads(path.read_text()) for path in paths]

    return results


def test_a_node_without_the_warm_start_stops_both_processes_with_one_message(nodes):
    ranks = nodes("nodes_on_own_disks")
    assert [result.get("error") for result in ranks] == ["ConfigError", "ConfigError"], ranks
    for result in ranks:
        assert "not on the disk of process(es) [1] of 2" in result["message"]
        assert "--model_name_or_path OUTPUT_DIR/warmup --warmup_sft_epochs 0" in result["message"]
