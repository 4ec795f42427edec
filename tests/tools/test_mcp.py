"""MCP servers as environments (grpo_tools.tools.mcp_client, mcp_env, mcp_config), against real servers started as a
user starts them: mcp-server-time (stateless) and mcp-server-git (stateful, on a per-rollout copy of a repository),
both from PyPI through `make install`, and a small server of the SDK's (tests/tools/mcp_servers/fake_server.py) that
misbehaves on request, over stdio and over Streamable HTTP on loopback.

Covered: the tools a server lists reach the model's prompt with the server's own schemas and its answers come back as
tool messages; arguments are validated before the server sees them; two rollouts of a stateful server do not see each
other's changes; a server killed mid-rollout, a call that never returns, a server that writes garbage and a server
that cannot start each end as docs/mcp.md says, with no process left behind; the per-rollout limits; the HTTP
transport; `grpo-tools mcp-tools` and its row check.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from grpo_tools.tools.environments import ENVIRONMENTS
from grpo_tools.tools.mcp_client import MCPLimits, MCPServer, MCPStartError, list_server_tools
from grpo_tools.tools.mcp_config import MCPArguments, check_mcp_rows, mcp_tools_main, prepare_mcp
from grpo_tools.tools.mcp_env import MCPSettings, configure_mcp


BIN = Path(sys.executable).parent
TIME_SERVER = str(BIN / "mcp-server-time")
GIT_SERVER = str(BIN / "mcp-server-git")
FAKE_SERVER = (sys.executable, str(Path(__file__).parent / "mcp_servers" / "fake_server.py"))


@pytest.fixture(autouse=True)
def forget_the_server():
    """Each test configures its own server; none is left registered or running after it."""
    yield
    ENVIRONMENTS.pop("mcp", None)
    from grpo_tools.tools import mcp_client

    mcp_client._close_all()  # what runs at exit
    assert not _servers(), "an MCP server outlived its test"


def _servers() -> list[psutil.Process]:
    """Our descendants that are MCP servers (marked by grpo-tools in their environment)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "GRPO_TOOLS_MCP_CONNECTION" in child.environ():
                found.append(child)
        except psutil.Error:
            continue
    return found


def _gone(pid: int | None, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while pid is not None and psutil.pid_exists(pid):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def git_template(tmp_path):
    """A small repository: one commit with README.md, and notes.txt not yet added."""
    template = tmp_path / "template"
    template.mkdir()
    git = ["git", "-C", str(template), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (template / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    (template / "notes.txt").write_text("notes\n")
    return template


def _mcp_row(tools, row_id="r0", answers=(), content="What time is it in Tokyo?"):
    return {
        "id": row_id,
        "messages": [{"role": "user", "content": content}],
        "tools": tools,
        "answers": list(answers),
        "category": "multi_turn",
        "env": {"name": "mcp"},
        "expected": "Tokyo",
    }


def test_a_real_servers_tools_reach_the_prompt_and_its_answers_the_model(tiny_model_dir, tokenizer, tmp_path):
    from grpo_tools.tools.environments import make_environment_factory
    from grpo_tools.tools.trajectories import multi_turn_dataset
    from grpo_tools.training.configs import ToolGRPOConfig
    from grpo_tools.training.trainer import ToolGRPOTrainer

    environment = configure_mcp(MCPSettings(MCPServer(command=(TIME_SERVER,))))
    tools = environment.tool_schemas()
    assert [tool["function"]["name"] for tool in tools] == ["convert_time", "get_current_time"]
    rows = [_mcp_row(tools, f"r{index}") for index in range(2)]
    call = json.dumps({"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}})
    turns = [f"<tool_call>\n{call}\n</tool_call><|im_end|>", "It is late in Tokyo.<|im_end|>"]
    prompts, seen = [], []

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        prompts.extend(tokenizer.decode(ids) for ids in prompt_ids)
        # The first turn calls the tool; once a tool result is in the conversation, the model answers
        texts = [turns[1] if "<tool_response>" in tokenizer.decode(ids) else turns[0] for ids in prompt_ids]
        return [tokenizer.encode(text, add_special_tokens=False) for text in texts], None

    def spy(completions, **kwargs):
        seen.extend(completions)
        return [float(index % 2) for index in range(len(completions))]

    config = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=2, per_device_train_batch_size=4,
                            max_completion_length=400, report_to=[], max_steps=1, save_strategy="no",
                            disable_tqdm=True, gradient_checkpointing=False)  # fmt: skip
    trainer = ToolGRPOTrainer(model=tiny_model_dir, reward_funcs=[spy], args=config, processing_class=tokenizer,
                              train_dataset=multi_turn_dataset(rows),
                              environment_factory=make_environment_factory(rows))  # fmt: skip
    trainer._generate_single_turn = generate
    trainer.model.train()
    dataset = multi_turn_dataset(rows)
    trainer._generate_and_score_completions([dataset[index] for index in range(len(dataset))])

    # The prompt carries each tool as the server's own schema says (the tiny template writes name(parameter: type)),
    # not one re-derived from the environment's methods, which take **arguments
    for tool in tools:
        properties = tool["function"]["parameters"]["properties"]
        signature = ", ".join(f"{name}: {schema['type']}" for name, schema in properties.items())
        assert f"{tool['function']['name']}({signature})" in prompts[0]
    # The server really answered each rollout: its JSON result, naming the zone, is the tool message
    assert len(seen) == 2
    for completion in seen:
        assert completion[1]["role"] == "tool"
        assert json.loads(completion[1]["content"])["timezone"] == "Asia/Tokyo"
    assert [record.status for environment in trainer.environments for record in environment.records] == ["ok"] * 2
    assert trainer._metrics["train"]["tools/failures/server_down"] == [0.0]


def test_arguments_are_validated_before_the_server_sees_them_and_limits_hold(tmp_path):
    log = tmp_path / "calls.jsonl"
    (tmp_path / "empty").mkdir()  # the server writes its notes in its working copy
    settings = MCPSettings(MCPServer(command=FAKE_SERVER, env={"FAKE_MCP_LOG": str(log)}),
                           MCPLimits(max_calls=4, max_result_chars=10), template=str(tmp_path / "empty"))  # fmt: skip
    environment = configure_mcp(settings)()
    environment.reset(env={"name": "mcp"})
    refused = json.loads(environment.count(amount="three"))
    assert "invalid arguments for count" in refused["error"]
    assert not log.exists() or "three" not in log.read_text()  # nothing reached the server
    assert environment.count(amount=3) == "3"
    assert json.loads(log.read_text().splitlines()[-1]) == {"name": "count", "arguments": {"amount": 3}}
    assert "fail" in json.loads(environment.fail(reason="no"))["error"]  # the server's own error
    assert environment.count(amount=1) == "4"
    # The fifth call of the rollout (the refused one counts) is past max_calls: answered without reaching the server
    assert "call limit" in json.loads(environment.count(amount=1))["error"]
    assert json.loads(log.read_text().splitlines()[-1])["arguments"] == {"amount": 1}
    assert len(log.read_text().splitlines()) == 3
    assert [record.status for record in environment.records] == ["validation", "ok", "server_error", "ok", "limit"]
    # A new rollout starts its own count of calls; a long result is cut to max_result_chars
    environment.reset(env={"name": "mcp"})
    assert environment.write_note(name="n.txt", text="x" * 50) == "wrote n.tx\n[cut at 10 characters]"
    cut = environment.read_note(name="n.txt")
    assert cut == "x" * 10 + "\n[cut at 10 characters]" and environment.records[-1].status == "limit"


def test_arguments_past_the_completion_budget_never_reach_the_server_and_are_counted(tmp_path):
    """The MCP executor holds the same per-call budget as BFCL's (grpo_tools.rewards.budget): arguments the schema
    accepts but the budget does not are refused before they are sent, the kind counted for the step's log."""
    from grpo_tools.rewards.budget import Budget, take_hit_counts

    log = tmp_path / "calls.jsonl"
    (tmp_path / "empty").mkdir()
    settings = MCPArguments(
        mcp_command=" ".join(FAKE_SERVER), mcp_env=[f"FAKE_MCP_LOG={log}"], mcp_template=str(tmp_path / "empty")
    ).mcp_settings()
    assert settings.budget == Budget()  # the keys alone give the default budget
    environment = configure_mcp(settings)()
    environment.reset(env={"name": "mcp"})
    take_hit_counts()
    hostile = {
        "integer_digits": lambda: environment.count(amount=10**150),
        "argument_chars": lambda: environment.write_note(name="n.txt", text="x" * 200_000),
    }
    for kind, call in hostile.items():
        answer = json.loads(call())
        assert "over the budget" in answer["error"] and environment.records[-1].status == "limit", kind
    assert not log.exists()  # neither reached the server
    assert take_hit_counts() == {"integer_digits": 1, "argument_chars": 1}
    assert environment.count(amount=2) == "2"  # a call within the budget still runs
    # A training run's budget_* keys reach the executor
    tight = Budget(integer_digits=2)
    environment = configure_mcp(MCPSettings(settings.server, settings.limits, settings.template, budget=tight))()
    environment.reset(env={"name": "mcp"})
    assert "over the budget" in json.loads(environment.count(amount=100))["error"]


def test_two_rollouts_of_a_stateful_server_do_not_see_each_others_changes(git_template):
    settings = MCPSettings(MCPServer(command=(GIT_SERVER, "--repository", "{workdir}")), template=str(git_template))
    cls = configure_mcp(settings)
    first, second = cls(), cls()
    first.reset(env={"name": "mcp"})
    second.reset(env={"name": "mcp"})
    assert first.workdir != second.workdir and first.connection.pid != second.connection.pid
    assert "main" in first.git_create_branch(repo_path=".", branch_name="feature")
    first.git_add(repo_path=".", files=["notes.txt"])
    first.git_commit(repo_path=".", message="add notes")
    assert "feature" in first.git_branch(repo_path=".", branch_type="local")
    assert "add notes" in first.git_log(repo_path=".")
    # The other rollout's repository is the template's
    assert "feature" not in second.git_branch(repo_path=".", branch_type="local")
    assert "add notes" not in second.git_log(repo_path=".") and "notes.txt" in second.git_status(repo_path=".")
    # The next rollout of the same environment starts from the template again, on the same server
    pid = first.connection.pid
    first.reset(env={"name": "mcp"})
    assert first.connection.pid == pid
    assert "feature" not in first.git_branch(repo_path=".", branch_type="local")
    assert "add notes" not in first.git_log(repo_path=".")
    # The template itself was never touched
    log = subprocess.run(["git", "-C", str(git_template), "log", "--oneline"], capture_output=True, text=True)
    assert log.stdout.count("\n") == 1
    # A path outside the working copy is refused by the server itself: an error message, not a crash
    assert "error" in first.git_status(repo_path="/")
    for environment in (first, second):
        environment._close()
        assert _gone(environment.connection.pid) and not environment.workdir.exists()


def test_a_server_killed_mid_rollout_and_a_call_that_never_returns_become_tool_messages():
    environment = configure_mcp(MCPSettings(MCPServer(command=FAKE_SERVER), MCPLimits(call_timeout=1.0)))()
    environment.reset(env={"name": "mcp"})
    assert environment.count(amount=2) == "2"
    pid = environment.connection.pid
    # The server exits in the middle of a call
    assert json.loads(environment.crash())["error"]
    assert environment.records[-1].status == "server_down" and _gone(pid)
    # The next call starts a fresh server (its memory is gone, the working copy is not)
    assert environment.count(amount=2) == "2"
    pid = environment.connection.pid
    # Killed from outside while idle: the next call finds it dead and answers from a fresh one
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    answer = environment.count(amount=1)
    assert answer == "1" or "error" in answer
    # A call that never returns: a timeout after call_timeout, and the stuck server is killed
    pid = environment.connection.pid
    start = time.monotonic()
    assert "did not answer within 1 s" in json.loads(environment.sleep(seconds=120))["error"]
    assert time.monotonic() - start < 10
    assert environment.records[-1].status == "timeout" and _gone(pid)
    assert environment.count(amount=5) == "5"
    environment._close()


@pytest.mark.slow
def test_a_server_that_writes_garbage_becomes_a_tool_message():
    environment = configure_mcp(MCPSettings(MCPServer(command=FAKE_SERVER), MCPLimits(call_timeout=2.0)))()
    environment.reset(env={"name": "mcp"})
    pid = environment.connection.pid
    assert json.loads(environment.garbage())["error"]
    assert environment.records[-1].status in ("server_down", "timeout") and _gone(pid)
    assert environment.count(amount=1) == "1"
    environment._close()


def test_a_server_that_cannot_start_stops_the_run_with_its_command_and_stderr(tmp_path, capsys):
    from grpo_tools.training.run import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(_mcp_row([])) + "\n")
    command = " ".join([*FAKE_SERVER, "--fail-start"])
    status = main(["--dataset_name", str(rows), "--output_dir", str(tmp_path / "out"), "--mcp_command", command,
                   "--model_name_or_path", str(tmp_path / "no-model"), "--per_device_train_batch_size", "2",
                   "--num_generations", "2", "--use_cpu", "true"])  # fmt: skip
    error = capsys.readouterr().err
    assert status == 2
    assert "fake_server.py --fail-start" in error and "cannot open its database" in error
    assert error.count("grpo-tools train:") == 1 and "Traceback" not in error
    # Rows naming `mcp` without a server: one message too
    with pytest.raises(ValueError, match="no MCP server is set"):
        prepare_mcp(MCPArguments(), [_mcp_row([])])
    with pytest.raises(MCPStartError, match="did not start"):
        list_server_tools(MCPServer(command=("/nonexistent/mcp-server",)))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_streamable_http_transport_on_loopback(tmp_path):
    port = _free_port()
    server = subprocess.Popen([*FAKE_SERVER, "--http", str(port)], cwd=tmp_path, stderr=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        environment = configure_mcp(MCPSettings(MCPServer(url=url)))()
        environment.reset(env={"name": "mcp"})
        assert environment.count(amount=4) == "4"
        assert environment.write_note(name="http.txt", text="over http") == "wrote http.txt"
        assert (tmp_path / "http.txt").read_text() == "over http"
        assert "invalid arguments" in environment.count(amount=[1])
        environment._close()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)


def test_mcp_tools_lists_a_servers_tools_as_rows_carry_them_and_checks_rows(tmp_path, capsys):
    assert mcp_tools_main(["--command", TIME_SERVER]) == 0
    tools = json.loads(capsys.readouterr().out)
    assert [tool["function"]["name"] for tool in tools] == ["convert_time", "get_current_time"]
    assert tools[1]["function"]["parameters"]["required"] == ["timezone"]
    good = _mcp_row(tools, "good", [{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}])
    bad = _mcp_row(tools[:1], "bad", [{"name": "get_current_time", "arguments": {"zone": 3}}])
    problems = check_mcp_rows([good, bad], tools)
    assert problems and all(problem.startswith("row 2 (id=bad)") for problem in problems)
    assert any("tools: differ" in problem for problem in problems)
    assert any("answers[0].arguments" in problem for problem in problems)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in (good, bad)))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"mcp_command: {TIME_SERVER}\nlearning_rate: 0.1\n")
    assert mcp_tools_main(["--config", str(recipe), "--check", str(rows)]) == 1
    captured = capsys.readouterr()
    assert "2 rows, 3 problems" in captured.out and "id=bad" in captured.err and "id=good" not in captured.err
    # check-data with --mcp-config: its own checks, then the server's
    from grpo_tools.cli import main as cli

    assert cli(["check-data", str(rows), "--mcp-config", str(recipe)]) == 1
    captured = capsys.readouterr()
    assert "tools: differ from the server's tools" in captured.err and "(id=bad)" in captured.out


INTERRUPTED = """
import os, signal, sys, time
from grpo_tools.tools.mcp_client import MCPServer
from grpo_tools.tools.mcp_env import MCPSettings, configure_mcp
environment = configure_mcp(MCPSettings(MCPServer(command=tuple(sys.argv[2:]))))()
print(environment.connection.pid, flush=True)
os.kill(os.getpid(), getattr(signal, sys.argv[1]))  # Ctrl-C, or a kill nothing can catch, in the middle of a run
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signal_name", "server"), [("SIGINT", FAKE_SERVER), ("SIGKILL", (GIT_SERVER, "--repository", "."))]
)
def test_an_interrupted_or_killed_run_leaves_no_server_behind(signal_name, server, tmp_path):
    """Ctrl-C: the run stops its servers at exit. SIGKILL: nothing of the run can, and the server (mcp-server-git,
    as a user runs it) exits when its stdin closes."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = subprocess.run([sys.executable, "-c", INTERRUPTED, signal_name, *server], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)  # fmt: skip
    assert result.returncode != 0
    if signal_name == "SIGINT":
        assert "KeyboardInterrupt" in result.stderr
    pid = int(result.stdout.split()[0])
    assert _gone(pid, within=10), f"the server outlived the run ({signal_name})"


def test_grpo_tools_eval_runs_rollouts_against_the_server_and_scores_its_state(tiny_model_dir, git_template, tmp_path):
    from grpo_tools.evaluation.evaluate import main as eval_main
    from tasks.mcp_git import TOOLS, generate_rows

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"mcp_command: {GIT_SERVER} --repository {{workdir}}\nmcp_template: {git_template}\n"
                      f"mcp_tools: {list(TOOLS)}\nmcp_state_check: tasks.mcp_git:check\n")  # fmt: skip
    tools = configure_mcp(MCPSettings(MCPServer(command=(GIT_SERVER, "--repository", "{workdir}")),
                                      template=str(git_template), tools=TOOLS)).tool_schemas()  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in generate_rows("test", 2, tools)))
    status = eval_main(["--model", tiny_model_dir, "--data", str(rows), "--output-dir", str(tmp_path / "eval"),
                        "--mcp-config", str(recipe), "--max-new-tokens", "24", "--max-turns", "2", "--quiet"])  # fmt: skip
    assert status == 0
    report = json.loads((tmp_path / "eval" / "base_report.json").read_text())
    # The tiny model solves nothing; what matters is that the state check ran on each rollout's working copy
    assert report["rows"]["data"] == 2 and report["state_check"] == 0.0
    assert set(report["tools"]["failures"]) >= {"server_error", "server_down", "timeout", "limit"}


def test_evaluations_state_check_reads_the_whole_row_as_in_training(tiny_model_dir, tokenizer, tmp_path, monkeypatch):
    """trl resets an environment with every column of the row, so a user's state check may read any of them; the
    evaluation's rollouts must hand it the same row, or a check that works in training fails in `grpo-tools eval`."""
    from transformers import AutoModelForCausalLM

    from grpo_tools.tools.rollouts import evaluate_multi_turn

    environment = configure_mcp(MCPSettings(MCPServer(command=(TIME_SERVER,)), state_check="tasks.mcp_git:check"))
    rows = [_mcp_row(environment.tool_schemas(), f"r{index}") for index in range(2)]
    rows[1]["expected"] = "Lima"
    seen = []

    def check(workdir, row):
        seen.append((row["id"], row["expected"], row["env"]))
        return float(row["expected"] == "Lima")

    monkeypatch.setattr(environment, "_state_check", staticmethod(check))  # a user's check (tasks.mcp_git's reads git)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    report = evaluate_multi_turn(model, tokenizer, rows, tmp_path, max_new_tokens=8, max_turns=1, progress=False)
    assert sorted(seen) == [("r0", "Tokyo", {"name": "mcp"}), ("r1", "Lima", {"name": "mcp"})]
    assert report["state_check"] == 0.5


def test_evaluation_runs_at_most_a_batch_of_servers_at_once(tiny_model_dir, tokenizer, tmp_path, monkeypatch):
    """Held-out sets of any size: `evaluate_multi_turn` rolls out `batch_size` rows at a time, and their servers stop
    once their state is checked, so a stateful server's eval never holds a process per row."""
    from transformers import AutoModelForCausalLM

    from grpo_tools.tools import mcp_client
    from grpo_tools.tools.rollouts import evaluate_multi_turn

    environment = configure_mcp(MCPSettings(MCPServer(command=(TIME_SERVER,)), state_check="tasks.mcp_git:check"))
    rows = [_mcp_row(environment.tool_schemas(), f"r{index}") | {"env": {"name": "mcp", "n": index}}
            for index in range(5)]  # fmt: skip
    most, start = [0], mcp_client.MCPConnection.start

    def counting_start(self):
        start(self)
        most[0] = max(most[0], len(_servers()))

    monkeypatch.setattr(mcp_client.MCPConnection, "start", counting_start)
    monkeypatch.setattr(environment, "_state_check", staticmethod(lambda workdir, row: float(row["env"]["n"] == 3)))
    report = evaluate_multi_turn(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tokenizer, rows, tmp_path,
                                 batch_size=2, max_new_tokens=8, max_turns=1, progress=False)  # fmt: skip
    assert most[0] == 2
    # Every row was rolled out and its state checked once, in the rows' order
    assert report["rows"]["data"] == 5 and report["state_check"] == 1 / 5
    ids = [json.loads(line)["id"] for line in (tmp_path / "eval_predictions.jsonl").read_text().splitlines()]
    assert ids == [row["id"] for row in rows]
