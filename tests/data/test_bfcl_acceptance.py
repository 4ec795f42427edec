"""Every BFCL row that BFCL's own checker can score is a valid row for us: each AST category of the installed bfcl-eval
(Java and JavaScript included), converted with `convert_rows("bfcl", ...)` and linted with `check_rows` (what
`grpo-tools check-data`, `eval` and `train` run), refuses only rows on which BFCL's `ast_checker` accepts no answer.

A refused row passes only when BFCL rejects both its gold answer (the first acceptable value of each parameter) and
its shortest answer (every parameter whose acceptable values hold "" left out): then no output can be right. The
reference is `benchmarks/bfcl_reference.py`, which reads Java and JavaScript types with BFCL's own tables and judges
JSON calls by BFCL's Python rules, as `tool_bfcl` does."""

import pytest


pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (`make install` installs it)")

from benchmarks import bfcl_reference


@pytest.fixture(scope="module")
def checker():
    return bfcl_reference.load_ast_checker()


@pytest.mark.parametrize("category", bfcl_reference.EVERY_AST_CATEGORY)
def test_no_row_bfcl_can_score_is_refused(category, checker):
    rows, refused = bfcl_reference.refusals(category, checker)
    assert rows > 0
    scorable = [f"{refusal.id}: {refusal.reason[:300]}" for refusal in refused if refusal.bfcl_accepts]
    assert not scorable, f"{len(scorable)} of {rows} rows refused that BFCL scores:\n" + "\n".join(scorable[:20])
