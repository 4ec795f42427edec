"""One registry of the rewards `reward_funcs` names (`grpo_tools.training.reward_funcs.REWARD_FUNCS`): the call
rewards of `grpo_tools.rewards` and the multi-turn rewards of `grpo_tools.tools.trajectories`. Each is accepted by
name by `grpo-tools train`'s parser, and on multi-turn rows the outcome reward and the extra-call cost join with
their own weights unless the recipe names them."""

import pytest
from trl import TrlParser

from grpo_tools.rewards import REWARDS
from grpo_tools.tools.trajectories import extra_calls_reward, outcome_reward
from grpo_tools.training.configs import ConfigError, ModelConfig, ToolGRPOConfig, ToolScriptArguments


MULTI_TURN_NAMES = ["outcome", "extra_calls"]


def parse(*args):
    """`grpo-tools train`'s parser over command-line flags alone; the training configuration."""
    parser = TrlParser((ToolScriptArguments, ToolGRPOConfig, ModelConfig), prog="grpo-tools train")
    return parser.parse_args_and_config(args=[*args, "--output_dir", "unused", "--use_cpu", "true"])[1]


@pytest.mark.parametrize("name", [*REWARDS, *MULTI_TURN_NAMES])
def test_every_reward_is_accepted_by_name_on_the_command_line(name):
    assert parse("--reward_funcs", name).reward_funcs == [name]


def test_the_registry_holds_every_reward_and_the_help_lists_each():
    from grpo_tools.training.reward_funcs import REWARD_FUNCS

    assert list(REWARD_FUNCS) == [*REWARDS, *MULTI_TURN_NAMES, "bfcl_turn"]
    assert REWARD_FUNCS["outcome"].function is outcome_reward
    assert REWARD_FUNCS["extra_calls"].function is extra_calls_reward
    assert all(REWARD_FUNCS[name].function is REWARDS[name].function for name in REWARDS)
    reward_funcs = ToolGRPOConfig.__dataclass_fields__["reward_funcs"].metadata
    assert list(reward_funcs["choices"]) == list(REWARD_FUNCS)
    assert all(name in reward_funcs["help"] for name in REWARD_FUNCS)


def test_multi_turn_rows_add_the_outcome_and_extra_call_cost_with_their_weights_unless_named(tmp_path):
    from grpo_tools.training.reward_funcs import training_rewards

    args = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, outcome_reward_weight=2.0, extra_call_cost=0.3)
    functions, added = training_rewards(args, multi_turn=True)
    assert [function.__name__ for function in functions] == ["tool_format_reward", "tool_exact_reward",
                                                             "tool_partial_reward"]  # fmt: skip
    assert added == [(outcome_reward, 2.0), (extra_calls_reward, 0.3)]  # as `grpo-tools train` always added them
    completion = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]
    assert functions[2]([completion], answers=['[{"name": "f", "arguments": {}}]'], tools=["[]"]) == [1.0]

    named = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_funcs=["tool_exact", "outcome"])
    functions, added = training_rewards(named, multi_turn=True)
    assert functions[1] is outcome_reward and added == [(extra_calls_reward, 0.1)]


def test_a_multi_turn_reward_on_single_turn_rows_is_refused(tmp_path):
    from grpo_tools.training.reward_funcs import training_rewards

    args = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_funcs=["tool_exact", "extra_calls"])
    with pytest.raises(ConfigError, match="reward_funcs extra_calls scores multi-turn trajectories"):
        training_rewards(args, multi_turn=False)


def test_bfcl_turn_takes_its_options_from_the_configuration_and_refuses_whole_conversations(tmp_path):
    """`bfcl_partial_credit` and `bfcl_extra_call_cost` reach the reward; on multi-turn rows `bfcl_turn` is refused."""
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")
    from grpo_tools.training.reward_funcs import training_rewards

    env = {"involved_classes": ["MathAPI"], "turn": 0, "ground_truth": [["add(a=1, b=2)", "add(a=3, b=4)"]]}
    with_extra = "[add(a=1, b=2), add(a=3, b=5), add(a=3, b=4), add(a=3, b=4)]"  # every result there, two extra calls
    scores = {}
    for partial, cost in (("none", 0.0), ("none", 0.1), ("state", 0.0), ("calls", 0.0)):
        args = ToolGRPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            reward_funcs=["bfcl_turn"],
            bfcl_partial_credit=partial,
            bfcl_extra_call_cost=cost,
        )
        (reward,), added = training_rewards(args, multi_turn=False)
        assert added == []
        scores[partial, cost] = reward([with_extra, "[add(a=1, b=2)]"], env=[env, env])
    assert scores["none", 0.0] == [1.0, 0.0]
    assert scores["none", 0.1] == [pytest.approx(0.8), 0.0]
    assert scores["state", 0.0] == [1.0, 0.5]  # MathAPI keeps no state: the state check passes, a result is missing
    assert scores["calls", 0.0] == [1.0, 0.0]  # and there is no state-changing call to credit
    args = ToolGRPOConfig(output_dir=str(tmp_path), use_cpu=True, reward_funcs=["bfcl_turn"])
    with pytest.raises(ConfigError, match="bfcl_turn scores BFCL's per-turn rows"):
        training_rewards(args, multi_turn=True)
