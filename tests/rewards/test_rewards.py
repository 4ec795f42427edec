"""Tests for `grpo_tools.rewards`: every reward's semantics from docs/rewards.md on hand-computed cases, the error kinds
recorded for each lost credit, irrelevance rows, gold-row errors, and the trl reward-function interface."""

import itertools
import json

import pytest

from grpo_tools.rewards import (
    ERROR_KINDS,
    REWARDS,
    GoldError,
    Verdict,
    argument_checks,
    get_reward_funcs,
    make_gold,
    score_completion,
    tool_bfcl_reward,
    tool_exact_reward,
)
from grpo_tools.rewards.parsing import ParseResult, ToolCall


def function(name, properties, required=()):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


WEATHER = function(
    "get_weather",
    {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "lat": {"type": "number"},
    },
    required=["city"],
)
TIMER = function("set_timer", {"minutes": {"type": "integer"}, "label": {"type": "string"}}, required=["minutes"])
BOOK = function(
    "book_room",
    {
        "room": {"type": "string"},
        "details": {"type": "object", "properties": {"location": {"type": "string"}, "duration": {"type": "number"}}},
        "people": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}},
        "urgent": {"type": "boolean"},
    },
    required=["room"],
)
TOOLS = [WEATHER, TIMER, BOOK]
LYON = {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}}
PARIS = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}


def hermes(*calls):
    return "".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls)


def score(reward, completion, answers, possible_answers=None, tools=TOOLS):
    return score_completion(reward, completion, make_gold(tools, answers, possible_answers))


# ---------------------------------------------------------------------------------------------------------------
# tool_format


@pytest.mark.parametrize(
    ("completion", "answers", "expected"),
    [
        (hermes(LYON), [LYON], Verdict(1.0)),
        (hermes(LYON, {"name": "set_timer", "arguments": {}}), [LYON], Verdict(1.0)),  # format only, not correctness
        (hermes({"name": "get_wether", "arguments": {}}), [LYON], Verdict(0.0, ("wrong_name",))),
        (hermes(LYON) + "<tool_call>{oops</tool_call>", [LYON], Verdict(0.0, ("parse_error",))),
        ("It will be sunny.", [LYON], Verdict(0.0, ("missed_call",))),
        ("It will be sunny.", [], Verdict(1.0)),
        (hermes(LYON), [], Verdict(0.0, ("unexpected_call",))),
    ],
)
def test_tool_format(completion, answers, expected):
    assert score("tool_format", completion, answers) == expected


# ---------------------------------------------------------------------------------------------------------------
# tool_schema


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (hermes(LYON), Verdict(1.0)),
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon", "unit": "kelvin"}}), Verdict(0.0, ("wrong_value",))),
        (hermes({"name": "get_weather", "arguments": {"unit": "celsius"}}), Verdict(0.0, ("missing_argument",))),
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon", "x": 1}}), Verdict(0.0, ("unexpected_argument",))),
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon", "days": 2.0}}), Verdict(0.0, ("wrong_type",))),
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon", "days": True}}), Verdict(0.0, ("wrong_type",))),
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon", "lat": 45}}), Verdict(1.0)),
        # one valid and one invalid call: half; a call that did not parse counts as invalid
        (hermes(LYON, {"name": "get_weather", "arguments": {}}), Verdict(0.5, ("missing_argument",))),
        (hermes(LYON) + "<tool_call>{oops</tool_call>", Verdict(0.5, ("parse_error",))),
        (hermes({"name": "nope", "arguments": {}}), Verdict(0.0, ("wrong_name",))),
    ],
)  # fmt: skip
def test_tool_schema(completion, expected):
    assert score("tool_schema", completion, [LYON]) == expected


# ---------------------------------------------------------------------------------------------------------------
# tool_exact


@pytest.mark.parametrize(
    ("completion", "answers", "expected"),
    [
        (hermes(LYON), [LYON], Verdict(1.0)),
        (hermes(PARIS, LYON), [LYON, PARIS], Verdict(1.0)),  # order-insensitive
        ('[get_weather(city="Lyon", unit="celsius"), get_weather(city="Paris", unit="celsius")]', [PARIS, LYON], Verdict(1.0)),
        (hermes(LYON, LYON), [LYON, PARIS], Verdict(0.0, ("wrong_value",))),  # a multiset, not a set
        (hermes(LYON), [LYON, LYON], Verdict(0.0, ("wrong_count",))),
        (hermes({"name": "get_weather", "arguments": {"city": "lyon", "unit": "celsius"}}), [LYON], Verdict(0.0, ("wrong_value",))),
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon"}}), [LYON], Verdict(0.0, ("missing_argument",))),
        (hermes({"name": "get_weather", "arguments": {**LYON["arguments"], "days": 1}}), [LYON], Verdict(0.0, ("unexpected_argument",))),
        (hermes({"name": "set_timer", "arguments": {"minutes": 5}}), [LYON], Verdict(0.0, ("wrong_name",))),
        # integer equals float only where the schema says number
        ('[get_weather(city="Lyon", lat=45)]', [{"name": "get_weather", "arguments": {"city": "Lyon", "lat": 45.0}}], Verdict(1.0)),
        ('[get_weather(city="Lyon", days=2.0)]', [{"name": "get_weather", "arguments": {"city": "Lyon", "days": 2}}], Verdict(0.0, ("wrong_type",))),
        ('[set_timer(minutes="5")]', [{"name": "set_timer", "arguments": {"minutes": 5}}], Verdict(0.0, ("wrong_type",))),
        ('[book_room(room="A", urgent=1)]', [{"name": "book_room", "arguments": {"room": "A", "urgent": True}}], Verdict(0.0, ("wrong_type",))),
        # the number rule follows the schema into arrays and objects
        ('[book_room(room="A", scores=[1, 2.5])]', [{"name": "book_room", "arguments": {"room": "A", "scores": [1.0, 2.5]}}], Verdict(1.0)),
        ('[book_room(room="A", details={"duration": 30})]', [{"name": "book_room", "arguments": {"room": "A", "details": {"duration": 30.0}}}], Verdict(1.0)),
        ("<tool_call>{broken", [LYON], Verdict(0.0, ("parse_error",))),
        ("No call.", [LYON], Verdict(0.0, ("missed_call",))),
        ("No call.", [], Verdict(1.0)),
        (hermes(LYON), [], Verdict(0.0, ("unexpected_call",))),
        ("<tool_call>{broken", [], Verdict(0.0, ("unexpected_call", "parse_error"))),
    ],
)  # fmt: skip
def test_tool_exact(completion, answers, expected):
    assert score("tool_exact", completion, answers) == expected


# ---------------------------------------------------------------------------------------------------------------
# tool_partial


def naive_partial(predicted, gold):
    """Reference implementation: try every injective pairing of the shorter side into the longer one."""

    def credit(p, g):
        if p.name != g.name:
            return 0.0
        union = p.arguments.keys() | g.arguments.keys()
        jaccard = len(p.arguments.keys() & g.arguments.keys()) / len(union) if union else 1.0
        same = [k for k, v in g.arguments.items() if k in p.arguments and json.dumps(p.arguments[k]) == json.dumps(v)]
        values = len(same) / len(g.arguments) if g.arguments else 1.0
        return (1 + jaccard + values) / 3

    short, long = (predicted, gold) if len(predicted) <= len(gold) else (gold, predicted)
    best = 0.0
    for chosen in itertools.permutations(range(len(long)), len(short)):
        pairs = zip(short, (long[i] for i in chosen), strict=True)
        best = max(best, sum(credit(*pair) if short is predicted else credit(pair[1], pair[0]) for pair in pairs))
    return best / max(len(predicted), len(gold))


@pytest.mark.parametrize(
    ("completion", "answers", "expected"),
    [
        (hermes(LYON), [LYON], 1.0),
        # city right, unit wrong: J = 1, V = 1/2 -> (1 + 1 + 0.5) / 3
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon", "unit": "fahrenheit"}}), [LYON], 2.5 / 3),
        # unit missing: J = 1/2, V = 1/2 -> 2/3
        (hermes({"name": "get_weather", "arguments": {"city": "Lyon"}}), [LYON], 2 / 3),
        # an extra argument: J = 2/3, V = 1 -> (1 + 2/3 + 1) / 3
        (hermes({"name": "get_weather", "arguments": {**LYON["arguments"], "days": 3}}), [LYON], (2 + 2 / 3) / 3),
        (hermes({"name": "set_timer", "arguments": {"minutes": 1}}), [LYON], 0.0),  # another tool earns nothing
        (hermes(LYON, PARIS), [LYON], 0.5),  # an extra call halves the credit
        (hermes(LYON), [LYON, PARIS], 0.5),  # so does a missing one
        (hermes(LYON, LYON, LYON, LYON), [LYON], 0.25),  # spamming calls never pays
        (hermes(LYON) + "<tool_call>{x</tool_call>", [LYON], 0.5),  # a failed call counts as a predicted call
        ("<tool_call>{x</tool_call>", [LYON], 0.0),
        ("No call.", [], 1.0),
    ],
)
def test_tool_partial_hand_computed(completion, answers, expected):
    assert score("tool_partial", completion, answers).score == pytest.approx(expected)


def test_tool_partial_uses_the_optimal_assignment_not_the_order():
    # Greedy in order would pair the first prediction with LYON (credit 2/3 via name+city) and lose PARIS's full match.
    predicted = [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                 {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "fahrenheit"}}]  # fmt: skip
    verdict = score("tool_partial", hermes(*predicted), [LYON, PARIS])
    assert verdict.score == pytest.approx((1 + 2.5 / 3) / 2)
    assert verdict.errors == ("wrong_value",)


CALL_POOL = [
    LYON,
    PARIS,
    {"name": "get_weather", "arguments": {"city": "Lyon"}},
    {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "fahrenheit", "days": 2}},
    {"name": "set_timer", "arguments": {"minutes": 5}},
    {"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}},
]


@pytest.mark.parametrize(
    ("predicted", "gold"),
    [(p, g) for p in itertools.combinations_with_replacement(range(6), 2) for g in [(0,), (1, 4), (0, 1, 5)]]
    + [((0, 2, 3, 5), (1, 4)), ((3,), (0, 1, 2))],
)
def test_tool_partial_matches_brute_force_reference(predicted, gold):
    predicted_calls = [CALL_POOL[i] for i in predicted]
    gold_calls = [CALL_POOL[i] for i in gold]
    expected = naive_partial(
        [ToolCall(c["name"], c["arguments"]) for c in predicted_calls],
        [ToolCall(c["name"], c["arguments"]) for c in gold_calls],
    )
    assert score("tool_partial", hermes(*predicted_calls), gold_calls).score == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------------------------
# tool_bfcl


WEATHER_POSSIBLE = [{"get_weather": {"city": ["Lyon", "Lyon, France"], "unit": ["celsius", ""]}}]


@pytest.mark.parametrize(
    ("completion", "answers", "possible", "expected"),
    [
        ('[get_weather(city="Lyon")]', [LYON], WEATHER_POSSIBLE, Verdict(1.0)),  # "" makes unit optional
        ('[get_weather(city="lyon, france", unit="celsius")]', [LYON], WEATHER_POSSIBLE, Verdict(1.0)),  # normalised
        ('[get_weather(city="LYON-FRANCE")]', [LYON], WEATHER_POSSIBLE, Verdict(1.0)),
        ('[get_weather(city="Lyon", unit="fahrenheit")]', [LYON], WEATHER_POSSIBLE, Verdict(0.0, ("wrong_value",))),
        ('[get_weather(city="Paris")]', [LYON], WEATHER_POSSIBLE, Verdict(0.0, ("wrong_value",))),
        ('[get_weather(unit="celsius")]', [LYON], WEATHER_POSSIBLE, Verdict(0.0, ("missing_argument",))),
        ('[get_weather(city="Lyon", days=2)]', [LYON], WEATHER_POSSIBLE, Verdict(0.0, ("unexpected_argument",))),
        ('[get_weather(city="Lyon", color="red")]', [LYON], WEATHER_POSSIBLE, Verdict(0.0, ("unexpected_argument",))),
        ('[set_timer(minutes=1)]', [LYON], WEATHER_POSSIBLE, Verdict(0.0, ("wrong_name",))),
        # without possible_answers: derived from answers, every given parameter required
        ('[get_weather(city="Lyon")]', [LYON], None, Verdict(0.0, ("missing_argument",))),
        ('[get_weather(city="lyon", unit="Celsius")]', [LYON], None, Verdict(1.0)),
        # strict types: an integer parameter rejects "10", 10.0 and true
        ('[set_timer(minutes=10)]', [{"name": "set_timer", "arguments": {"minutes": 10}}], None, Verdict(1.0)),
        ('[set_timer(minutes="10")]', [{"name": "set_timer", "arguments": {"minutes": 10}}], None, Verdict(0.0, ("wrong_type",))),
        ('[set_timer(minutes=10.0)]', [{"name": "set_timer", "arguments": {"minutes": 10}}], None, Verdict(0.0, ("wrong_type",))),
        ('[set_timer(minutes=True)]', [{"name": "set_timer", "arguments": {"minutes": 1}}], None, Verdict(0.0, ("wrong_type",))),
        # a number accepts an integer at the top level only
        ('[get_weather(city="A", lat=45)]', [{"name": "get_weather", "arguments": {"city": "A", "lat": 45.0}}], None, Verdict(1.0)),
        ('[book_room(room="A", scores=[1.0, 2.5])]', [{"name": "book_room", "arguments": {"room": "A", "scores": [1.0, 2.5]}}], None, Verdict(1.0)),
        ('[book_room(room="A", scores=[1, 2.5])]', [{"name": "book_room", "arguments": {"room": "A", "scores": [1.0, 2.5]}}], None, Verdict(0.0, ("wrong_type",))),
        # lists match element by element, in order, with strings normalised
        ('[book_room(room="A", people=["Ann", "Bob"])]', [{"name": "book_room", "arguments": {"room": "A", "people": ["ann", "bob"]}}], None, Verdict(1.0)),
        ('[book_room(room="A", people=["Bob", "Ann"])]', [{"name": "book_room", "arguments": {"room": "A", "people": ["Ann", "Bob"]}}], None, Verdict(0.0, ("wrong_value",))),
        # objects key by key, one level deep, each key with its own acceptable list
        ('[book_room(room="A", details={"location": "room 2", "duration": 30})]',
         [{"name": "book_room", "arguments": {"room": "A"}}],
         [{"book_room": {"room": ["A"], "details": [{"location": ["Room 2"], "duration": [30]}]}}], Verdict(1.0)),
        ('[book_room(room="A", details={"location": "Room 2"})]',
         [{"name": "book_room", "arguments": {"room": "A"}}],
         [{"book_room": {"room": ["A"], "details": [{"location": ["Room 2"], "duration": [30]}]}}], Verdict(0.0, ("wrong_value",))),
        ('[book_room(room="A", details={"location": "Room 2"})]',
         [{"name": "book_room", "arguments": {"room": "A"}}],
         [{"book_room": {"room": ["A"], "details": [{"location": ["Room 2"], "duration": [30, ""]}]}}], Verdict(1.0)),
        ('[book_room(room="A", details={"location": "Room 2", "floor": 1})]',
         [{"name": "book_room", "arguments": {"room": "A"}}],
         [{"book_room": {"room": ["A"], "details": [{"location": ["Room 2"]}]}}], Verdict(0.0, ("wrong_value",))),
        ('[book_room(room="A", urgent=1)]', [{"name": "book_room", "arguments": {"room": "A", "urgent": True}}], None, Verdict(0.0, ("wrong_type",))),
        # parallel: equal counts, any order
        ('[get_weather(city="Paris", unit="celsius"), get_weather(city="Lyon", unit="celsius")]', [LYON, PARIS], None, Verdict(1.0)),
        ('[get_weather(city="Paris", unit="celsius")]', [LYON, PARIS], None, Verdict(0.0, ("wrong_count",))),
        ("no call", [], None, Verdict(1.0)),
        ('[get_weather(city="Lyon")]', [], None, Verdict(0.0, ("unexpected_call",))),
    ],
)  # fmt: skip
def test_tool_bfcl(completion, answers, possible, expected):
    assert score("tool_bfcl", completion, answers, possible) == expected


@pytest.mark.parametrize(
    ("arguments", "possible", "expected"),
    [
        # `is_variable`: acceptable values of another type than the schema's (simple_python_307 lists `true` for a
        # string parameter) accept that type, compared exactly; the schema's own type is compared exactly too.
        ({"city": True}, {"city": [True]}, 1.0),
        ({"city": "true"}, {"city": [True]}, 0.0),
        ({"city": 1}, {"city": [True]}, 0.0),
        # strings: "" among the acceptable values also accepts any string that normalises to "" ("-", " ")
        ({"city": "Lyon", "unit": "-"}, {"city": ["Lyon"], "unit": ["celsius", ""]}, 1.0),
        # BFCL reads ' as " in strings
        ({"city": "L'yon"}, {"city": ['L"yon']}, 1.0),
        # a number parameter accepts an integer (BFCL converts it to a float first)
        ({"city": "A", "lat": 2}, {"city": ["A"], "lat": [2.0]}, 1.0),
    ],
)
def test_tool_bfcl_quirks(arguments, possible, expected):
    call = {"name": "get_weather", "arguments": arguments}
    assert score("tool_bfcl", hermes(call), [call], [{"get_weather": possible}]).score == expected


def test_tool_bfcl_list_of_objects_compares_each_object_in_order():
    possible = [
        {"book_room": {"room": ["A"], "people": [[{"name": ["Ann"], "age": [30, ""]}, {"name": ["Bob"]}], ""]}}
    ]
    book = function(
        "book_room", {"room": {"type": "string"}, "people": {"type": "array", "items": {"type": "object"}}}
    )
    gold = [{"name": "book_room", "arguments": {"room": "A", "people": [{"name": "Ann"}, {"name": "Bob"}]}}]
    right = {"name": "book_room", "arguments": {"room": "a", "people": [{"name": "ann"}, {"name": "BOB"}]}}
    swapped = {"name": "book_room", "arguments": {"room": "A", "people": [{"name": "Bob"}, {"name": "Ann"}]}}
    empty = {"name": "book_room", "arguments": {"room": "A", "people": []}}  # "" accepts the empty list
    assert [score("tool_bfcl", hermes(c), gold, possible, tools=[book]).score for c in (right, swapped, empty)] == [
        1.0,
        0.0,
        1.0,
    ]


def test_tool_bfcl_pairs_first_fit_as_bfcl_does_while_exact_pairs_optimally():
    # The first call fits both gold entries. BFCL gives it to the first entry (`parallel_function_checker_no_order`),
    # which strands the second call; the same calls in the other order pair up.
    possible = [{"get_weather": {"city": ["Lyon", "Paris"], "unit": ["celsius", ""]}},
                {"get_weather": {"city": ["Lyon"], "unit": ["celsius", ""]}}]  # fmt: skip
    lyon, paris = (
        {"name": "get_weather", "arguments": {"city": "Lyon"}},
        {"name": "get_weather", "arguments": {"city": "Paris"}},
    )
    assert score("tool_bfcl", hermes(lyon, paris), [PARIS, LYON], possible) == Verdict(0.0, ("wrong_value",))
    assert score("tool_bfcl", hermes(paris, lyon), [PARIS, LYON], possible) == Verdict(1.0)
    gold = [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Lyon"}},
    ]
    assert score("tool_exact", hermes(lyon, paris), gold) == Verdict(1.0)


def test_tool_bfcl_reads_bfcl_style_tool_definitions():
    bfcl_tool = {
        "name": "calc_area",
        "description": "Area of a shape.",
        "parameters": {"type": "dict", "properties": {"base": {"type": "float"}, "unit": {"type": "string"}},
                       "required": ["base"]},
    }  # fmt: skip
    possible = [{"calc_area": {"base": [10.0], "unit": ["cm", ""]}}]
    answers = [{"name": "calc_area", "arguments": {"base": 10.0}}]
    assert score("tool_bfcl", "[calc_area(base=10)]", answers, possible, tools=[bfcl_tool]) == Verdict(1.0)
    assert score("tool_bfcl", '[calc_area(base="10")]', answers, possible, tools=[bfcl_tool]).score == 0.0


# ---------------------------------------------------------------------------------------------------------------
# Every reward: irrelevance rows, robustness, gold errors, the trl interface


@pytest.mark.parametrize("reward", list(REWARDS))
@pytest.mark.parametrize(
    ("completion", "expected"),
    [("I can't help with that using these tools.", 1.0), (hermes(LYON), 0.0), ("<tool_call>{", 0.0)],
)
def test_irrelevance_rows_reward_calling_nothing_in_every_reward(reward, completion, expected):
    if reward == "tool_bfcl" and completion == "<tool_call>{":
        expected = 1.0  # BFCL: an output that does not decode is no call (`_evaluate_single_relevance_entry`)
    if reward == "tool_decision" and expected == 0.0:
        expected = -1.0  # the decision reward pays a call where none is right below nothing (TruthRL's -1)
    assert score(reward, completion, []).score == expected


def test_tool_bfcl_counts_an_undecodable_output_as_no_call_where_none_is_right():
    assert score("tool_bfcl", hermes(LYON) + "<tool_call>{", []) == Verdict(1.0)
    assert score("tool_bfcl", hermes(LYON), []) == Verdict(0.0, ("unexpected_call",))
    assert score("tool_bfcl", hermes(LYON) + "<tool_call>{", [LYON]) == Verdict(0.0, ("parse_error",))


@pytest.mark.parametrize("reward", list(REWARDS))
def test_exact_match_scores_one_in_every_reward(reward):
    assert score(reward, hermes(LYON, PARIS), [PARIS, LYON]) == Verdict(1.0)


@pytest.mark.parametrize("reward", list(REWARDS))
@pytest.mark.parametrize("completion", ["", "<tool_call>", "[" * 5000, "\x00\ufffd", "[f(x=1)]" * 3, "{}"])
def test_malformed_completions_only_score_lower(reward, completion):
    verdict = score(reward, completion, [LYON])
    # The decision reward pays a broken call as a wrong one (-1) and an answer in words as abstaining (0).
    lowest = -1.0 if reward == "tool_decision" else 0.0
    assert lowest <= verdict.score < 1.0
    assert set(verdict.errors) <= set(ERROR_KINDS)


@pytest.mark.parametrize(
    ("answers", "possible", "tools", "message"),
    [
        (None, None, TOOLS, "answers is missing"),
        ({"name": "f"}, None, TOOLS, "answers must be a list"),
        ([{"arguments": {}}], None, TOOLS, r"answers\[0\] must be an object with a string 'name'"),
        ([{"name": "f", "arguments": [1]}], None, TOOLS, r"answers\[0\].arguments must be an object"),
        ("[not json", None, TOOLS, "answers is a string but not valid JSON"),
        ([LYON], [{"get_weather": {"city": "Lyon"}}], TOOLS, "must map each parameter to a list"),
        ([LYON], [{"a": {}, "b": {}}], TOOLS, "exactly one function name"),
        ([LYON, PARIS], WEATHER_POSSIBLE, TOOLS, "has 1 entries but answers has 2 calls"),
        ([LYON], None, {"name": "get_weather"}, "tools must be a list"),
    ],
)
def test_malformed_gold_rows_raise_naming_the_row(answers, possible, tools, message):
    with pytest.raises(GoldError, match=message):
        score_completion("tool_bfcl", hermes(LYON), make_gold(tools, answers, possible, row="row 7 (id=w-7)"))
    with pytest.raises(GoldError, match=r"row 7 \(id=w-7\)"):
        score_completion("tool_bfcl", hermes(LYON), make_gold(tools, answers, possible, row="row 7 (id=w-7)"))


def test_trl_signature_scores_a_batch_and_logs_error_kinds():
    logged = {}
    completions = [[{"role": "assistant", "content": hermes(LYON)}], [{"role": "assistant", "content": "No."}]]
    rewards = tool_exact_reward(
        prompts=[[{"role": "user", "content": "Weather in Lyon?"}]] * 2,
        completions=completions,
        completion_ids=[[1, 2], [3]],
        tools=[TOOLS, json.dumps(TOOLS)],  # datasets may hold nested columns as JSON strings
        answers=[[LYON], json.dumps([LYON])],
        possible_answers=[None, None],
        id=["w-1", "w-1"],
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert rewards == [1.0, 0.0]
    assert logged["tool_exact/missed_call"] == 0.5
    assert logged["tool_exact/wrong_value"] == 0.0


def test_trl_batch_error_names_the_row_id():
    with pytest.raises(GoldError, match=r"row 1 \(id=bad-row\)"):
        tool_bfcl_reward(["x", "y"], tools=[TOOLS, TOOLS], answers=[[LYON], [{"nom": "f"}]], id=["ok", "bad-row"])


def test_registry_names_functions_and_rejects_unknown_names():
    assert list(REWARDS) == ["tool_format", "tool_schema", "tool_exact", "tool_partial", "tool_bfcl", "tool_decision"]
    assert get_reward_funcs(["tool_exact", "tool_bfcl"]) == [tool_exact_reward, tool_bfcl_reward]
    with pytest.raises(ValueError, match="unknown reward\\(s\\) 'tool_magic'; choose from tool_format"):
        get_reward_funcs(["tool_magic"])


def test_rewards_are_usable_by_a_plain_trl_grpo_trainer_signature():
    # trl calls reward_func(prompts=..., completions=..., completion_ids=..., **columns): no other argument is needed.
    for spec in REWARDS.values():
        assert spec.function(prompts=["p"], completions=["no"], completion_ids=[[0]], tools=[TOOLS], answers=[[]]) == [
            1.0
        ]


def test_scorers_take_parse_results():
    gold = make_gold(TOOLS, [LYON])
    parsed = ParseResult((ToolCall("get_weather", {"city": "Lyon", "unit": "celsius"}),))
    for spec in REWARDS.values():
        assert spec.scorer(parsed, gold) == Verdict(1.0)


# ---------------------------------------------------------------------------------------------------------------
# argument_checks: which gold argument values a completion got wrong


def checks(completion, answers, tools=TOOLS):
    return sorted(argument_checks(completion, make_gold(tools, answers)))


def test_argument_checks_name_each_gold_argument_of_a_call_to_the_right_tool():
    wrong_unit = {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "fahrenheit"}}
    assert checks(hermes(wrong_unit), [LYON]) == [("get_weather.city", True), ("get_weather.unit", False)]
    assert checks(hermes(LYON), [LYON]) == [("get_weather.city", True), ("get_weather.unit", True)]


def test_argument_checks_pair_parallel_calls_in_any_order():
    rome = {"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}
    # PARIS is called as Rome: the Lyon call pairs with the gold Lyon call wherever it stands.
    assert checks(hermes(rome, LYON), [LYON, PARIS]) == [
        ("get_weather.city", False),
        ("get_weather.city", True),
        ("get_weather.unit", True),
        ("get_weather.unit", True),
    ]


def test_argument_checks_count_a_left_out_argument_as_wrong_and_follow_the_number_rule():
    assert checks(hermes({"name": "get_weather", "arguments": {"city": "Lyon"}}), [LYON]) == [
        ("get_weather.city", True),
        ("get_weather.unit", False),
    ]
    located = {"name": "get_weather", "arguments": {"city": "Lyon", "lat": 45}}
    as_float = {"name": "get_weather", "arguments": {"city": "Lyon", "lat": 45.0}}
    assert checks(hermes(as_float), [located]) == [("get_weather.city", True), ("get_weather.lat", True)]


@pytest.mark.parametrize(
    ("completion", "answers"),
    [
        (hermes({"name": "set_timer", "arguments": {"minutes": 5}}), [LYON]),  # wrong tool: nothing to compare
        ("It will be sunny.", [LYON]),  # no call
        ("<tool_call>{oops</tool_call>", [LYON]),  # nothing parsed
        (hermes(LYON), []),  # irrelevance row
    ],
)
def test_argument_checks_are_empty_without_a_call_to_a_gold_tool(completion, answers):
    assert checks(completion, answers) == []


@pytest.mark.parametrize("wrapped", [True, False])
def test_qwen3_coder_calls_are_cast_by_the_schema_inside_tool_call_too(wrapped):
    # Qwen3-Coder writes its XML inside <tool_call>; each value is text until the tool's schema casts it.
    xml = (
        "<function=book_room>\n<parameter=room>\nA 12\n</parameter>\n<parameter=people>\n"
        '["Ann", "Bob"]\n</parameter>\n<parameter=scores>\n[1.5, 2.0]\n</parameter>\n<parameter=urgent>\n'
        'true\n</parameter>\n<parameter=details>\n{"location": "Room 2", "duration": 30}\n</parameter>\n'
        "</function>\n<function=set_timer>\n<parameter=minutes>\n-7\n</parameter>\n<parameter=label>\n"
        "10\n</parameter>\n</function>"
    )
    completion = f"<tool_call>\n{xml}\n</tool_call>" if wrapped else xml
    book = {"room": "A 12", "people": ["Ann", "Bob"], "scores": [1.5, 2.0], "urgent": True,
            "details": {"location": "Room 2", "duration": 30}}  # fmt: skip
    gold = [
        {"name": "book_room", "arguments": book},
        {"name": "set_timer", "arguments": {"minutes": -7, "label": "10"}},
    ]
    for reward in ("tool_exact", "tool_bfcl", "tool_schema", "tool_partial"):
        assert score(reward, completion, gold) == Verdict(1.0), reward
    wrong = completion.replace("\n-7\n", "\n8\n")
    assert score("tool_exact", wrong, gold).score == 0.0
