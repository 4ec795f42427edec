"""Swapped no-call rows (`tasks.swapped`): each is a call row's question offered another API's tools that share no
telling word with the question or its own tools, no answer is right, every question is used at most once, the rows
are the same for a seed, and a row that does not fit is not kept."""

from grpo_tools.rewards import make_gold, score_completion
from tasks.swapped import name_words, swapped_rows


def _row(row_id, question, *names, answers=True):
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
        for name in names
    ]
    return {
        "id": row_id,
        "messages": [{"role": "user", "content": question}],
        "tools": tools,
        "answers": [{"name": names[0], "arguments": {}}] if answers else [],
    }


ROWS = [
    _row("live_simple_0-0-0", "What is the weather in Paris?", "get_current_weather"),
    _row("live_simple_1-0-1", "Weather in Rome tomorrow", "get_current_weather"),
    _row("live_simple_2-1-0", "Play a song by Queen", "play_song"),
    _row("live_multiple_3-2-0", "Book a table for two at Nopa", "restaurant.BookTable", "restaurant.find"),
    _row("live_multiple_4-3-0", "Convert 10 USD to EUR", "currency_convert", "stock_price.get"),
    _row("live_simple_5-4-0", "Fetch https://example.com", "requests.get"),
    _row("live_irrelevance_6-5-0", "Tell me a joke", "play_song", answers=False),
]


def _api(row_id):
    return row_id.rpartition("_")[2].split("-")[1]


def test_each_row_is_a_call_rows_question_with_another_apis_tools_that_share_no_telling_word():
    made, pairs = swapped_rows(ROWS, 10, seed=0, api=_api)
    by_id = {row["id"]: row for row in ROWS}
    assert made and len(made) == len(pairs)
    for row in made:
        question, donor = (by_id[row_id] for row_id in pairs[row["id"]])
        assert question["answers"] and donor["answers"]  # only call rows give questions and tools
        assert row["messages"] == question["messages"] and row["tools"] == donor["tools"]
        assert row["answers"] == [] and row["category"] == "irrelevance"
        assert _api(question["id"]) != _api(donor["id"])
        donor_words = set().union(*(name_words(tool["function"]["name"]) for tool in donor["tools"]))
        own_words = set().union(*(name_words(tool["function"]["name"]) for tool in question["tools"]))
        assert not donor_words & own_words
        assert not donor_words & set(question["messages"][0]["content"].casefold().replace("?", "").split())
        assert donor["id"] != "live_simple_5-4-0"  # requests.get could serve almost any request
    questions = [question for question, _ in pairs.values()]
    assert len(questions) == len(set(questions))


def test_abstaining_is_the_only_right_answer_on_a_swapped_row():
    made, _ = swapped_rows(ROWS, 1, seed=0, api=_api)
    gold = make_gold(made[0]["tools"], made[0]["answers"])
    assert score_completion("tool_bfcl", "I cannot do that with these tools.", gold).score == 1.0
    name = made[0]["tools"][0]["function"]["name"]
    call = f'<tool_call>\n{{"name": "{name}", "arguments": {{}}}}\n</tool_call>'
    assert score_completion("tool_bfcl", call, gold).score == 0.0


def test_the_rows_are_the_same_for_a_seed_and_count_and_fits_are_respected():
    assert swapped_rows(ROWS, 3, seed=1, api=_api) == swapped_rows(ROWS, 3, seed=1, api=_api)
    assert len(swapped_rows(ROWS, 2, seed=0, api=_api)[0]) == 2
    assert swapped_rows(ROWS, 5, seed=0, api=_api, fits=lambda row: False) == ([], {})
    kept, _ = swapped_rows(ROWS, 10, seed=0, api=_api, fits=lambda row: len(row["tools"]) == 1)
    assert kept and all(len(row["tools"]) == 1 for row in kept)


def test_name_words_split_case_and_punctuation_and_leave_out_generic_words():
    assert name_words("get_current_weather") == {"current", "weather"}
    assert name_words("restaurant.BookTable") == {"restaurant", "book", "table"}
    assert name_words("Services_4_BookAppointment") == {"book", "appointment"}
