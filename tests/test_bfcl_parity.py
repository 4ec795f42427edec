"""`tool_bfcl` against BFCL's own checker on BFCL's own data: every case of the AST categories and irrelevance from the
installed bfcl-eval, converted with `convert_rows("bfcl", ...)`, each with model outputs of our design
(`benchmarks/bfcl_reference.py`: every acceptable value, wrong types, string variants, dropped and extra parameters,
dropped, extra, renamed and reordered calls). `tool_bfcl` reads each as Hermes text, both through the trl reward
function with a case's outputs together, as in training (the row read once, then its prepared rules reused), and
each output on its own against its parsed row, as `grpo-tools score` scores a data row (the rules applied where
they stand, nothing prepared); BFCL's `ast_checker` reads the decoded calls. Their verdicts must agree on every
output, both ways."""

import json

import pytest

from grpo_tools.rewards import make_gold, score_completion, tool_bfcl_reward


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_reference


@pytest.fixture(scope="module")
def checker():
    return bfcl_reference.load_ast_checker()


@pytest.mark.parametrize("category", bfcl_reference.CATEGORIES)
def test_tool_bfcl_gives_bfcls_verdict_on_every_output(category, checker):
    completions, columns, theirs, labels = [], {"tools": [], "answers": [], "possible_answers": []}, [], []
    for case in bfcl_reference.cases(category):
        row = case.row
        possible = json.dumps(row["possible_answers"]) if "possible_answers" in row else None
        for decoded in bfcl_reference.model_outputs(case):
            completions.append(bfcl_reference.hermes(decoded))
            columns["tools"].append(json.dumps(row["tools"]))
            columns["answers"].append(json.dumps(row["answers"]))
            columns["possible_answers"].append(possible)
            theirs.append(bfcl_reference.bfcl_verdict(checker, case, decoded))
            labels.append(f"{row['id']}: {json.dumps(decoded)[:300]}")
    ours = tool_bfcl_reward(completions, **columns)
    # One output a row: each output against a gold of its own, read from the parsed row.
    alone = []
    for completion, *row in zip(
        completions, columns["tools"], columns["answers"], columns["possible_answers"], strict=True
    ):
        gold = make_gold(*(None if column is None else json.loads(column) for column in row))
        alone.append(score_completion("tool_bfcl", completion, gold).score)
    for way, scores in (("a case's outputs together", ours), ("each output alone", alone)):
        disagreements = [
            f"{label} -> BFCL {'accepts' if bfcl else 'rejects'}"
            for label, score, bfcl in zip(labels, scores, theirs, strict=True)
            if (score == 1.0) != bfcl
        ]
        assert not disagreements, f"{way}: {len(disagreements)} of {len(scores)} differ:\n" + "\n".join(
            disagreements[:20]
        )
    # The outputs test both verdicts, not one: each category has outputs BFCL accepts and outputs it rejects.
    assert 0 < sum(theirs) < len(theirs)
