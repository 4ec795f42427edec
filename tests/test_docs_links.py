"""Every link in README.md, CHANGELOG.md and docs/*.md leads somewhere: a relative link names a file or folder of the
repository, and a `#anchor` names a heading of the page it points to, slugged as GitHub slugs headings. Links inside
code (fenced blocks, `inline spans`) and web addresses are not followed: the tests run without a network."""

import re
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")])

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
