"""Every link in README.md, CHANGELOG.md, docs/*.md and experiments/*.md leads somewhere: a relative link names a file
or folder of the repository, and a `#anchor` names a heading of the page it points to, slugged as GitHub slugs
headings. Links inside code (fenced blocks, `inline spans`) and web addresses are not followed: the tests run without
a network."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md"), *(REPO / "experiments").glob("*.md")]
)

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:")


def without_code(text: str) -> str:
    """The page with fenced blocks and inline code spans blanked (links there are examples, not links)."""
    text = FENCE.sub(lambda match: "\n" * match.group(0).count("\n"), text)
    return CODE_SPAN.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (code, emphasis and link markup dropped) lowercased, every character
    but letters, digits, `_`, `-` and spaces removed, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](link) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page; a repeated heading gets `-1`, `-2`, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each link of `page` that leads nowhere, with the reason."""
    problems = []
    for target in LINK.findall(without_code(page.read_text(encoding="utf-8"))):
        if target.startswith(EXTERNAL):
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            problems.append(
                f"{target}: no file {destination.relative_to(REPO) if REPO in destination.parents else destination}"
            )
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{target}: no heading with anchor #{anchor} in {destination.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_link_leads_somewhere(page):
    assert page.is_file(), f"{page.relative_to(REPO)} is missing"
    assert broken_links(page) == []


def test_the_docs_folder_has_pages():
    assert len(PAGES) > 2


def test_a_missing_file_or_anchor_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## The `score` command, in short\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Title\n\n"
        "[ok](other.md) [ok](other.md#the-score-command-in-short) [ok](#title-1) [ok](https://example.com/x)\n"
        "`[ignored](nowhere.md)`\n\n```\n[ignored](nowhere.md)\n```\n\n"
        "[bad](nowhere.md) [bad](other.md#missing) ![bad](img.png) [bad](#title-2)\n"
    )
    problems = broken_links(page)
    assert [problem.split(":")[0] for problem in problems] == ["nowhere.md", "other.md#missing", "img.png", "#title-2"]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("`grpo-tools train`", "grpo-tools-train"),
        ("BFCL evaluation offline: `make eval-bfcl`", "bfcl-evaluation-offline-make-eval-bfcl"),
        ("`tool_bfcl` and BFCL's own checker", "tool_bfcl-and-bfcls-own-checker"),
        ("What helps a small model learn, and what did not", "what-helps-a-small-model-learn-and-what-did-not"),
        ("[Unreleased]", "unreleased"),
    ],
)
def test_anchors_are_slugged_as_github_slugs_them(heading, anchor):
    assert slug(heading) == anchor


# Docstrings and comments of the repository's Python files cite pages by name ("docs/rewards.md", "data/README.md"):
# each must be a file of the repository, so a reader who follows the pointer finds the page.
PYTHON_FOLDERS = ("grpo_tools", "tests", "benchmarks", "tools")
PAGE_NAME = re.compile(r"(?<![\w./*-])((?:[\w-]+/)*[\w-]+\.md)\b")


def prose(source: str) -> list[tuple[int, str]]:
    """The docstrings and comments of a Python source, each with the line it starts on (string literals in code are
    data, such as the name of a file a test writes, and are not read)."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.append((first.lineno, first.value.value))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def missing_pages(path: Path, repo: Path = REPO) -> list[str]:
    """Each page that a docstring or comment of `path` names and the repository lacks, as `file:line: name`. A name
    with a folder is read from the repository's root; a bare name from the root or the file's own folder."""
    problems = []
    for line, text in prose(path.read_text(encoding="utf-8")):
        for match in PAGE_NAME.finditer(text):
            name = match.group(1)
            if not ((repo / name).is_file() or ("/" not in name and (path.parent / name).is_file())):
                problems.append(f"{path.relative_to(repo)}:{line + text.count(chr(10), 0, match.start())}: {name}")
    return problems


PYTHON_FILES = sorted(path for folder in PYTHON_FOLDERS for path in (REPO / folder).rglob("*.py"))


def test_every_page_a_docstring_or_comment_names_is_in_the_repository():
    assert len(PYTHON_FILES) > 50
    problems = [problem for path in PYTHON_FILES for problem in missing_pages(path)]
    assert not problems, "named in a docstring or comment, not in the repository: " + ", ".join(problems)


def test_a_page_missing_from_the_repository_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "rewards.md").write_text("# Rewards\n")
    (tmp_path / "README.md").write_text("# Project\n")
    module = tmp_path / "module.py"
    module.write_text(
        '"""The rewards (docs/rewards.md, README.md); the semantics are in DESIGN.md."""\n\n'
        'CARD = "card.md"  # a file the code writes, not a citation\n\n\n'
        "def f():\n"
        '    """Scores as docs/missing.md says."""\n'
        "    return 1  # see NOTES.md and `docs/*.md`\n"
    )
    assert missing_pages(module, repo=tmp_path) == [
        "module.py:1: DESIGN.md",
        "module.py:7: docs/missing.md",
        "module.py:8: NOTES.md",
    ]
