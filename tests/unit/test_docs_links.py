"""Every relative link in README.md and docs/ reaches a file, and every #anchor one of its headings.

A renamed heading or a moved section otherwise leaves a link that still renders and goes nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_slug_follows_githubs_rule() -> None:
    assert _slug("Benchmark (`bench/reconcile_scale.py`)") == "benchmark-benchreconcile_scalepy"
    assert _slug("Growth: 250, 1,000 and 3,000 resources") == "growth-250-1000-and-3000-resources"


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for document in _documents():
        for target in LINK.findall(FENCE.sub("", document.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            path_part, _, anchor = target.partition("#")
            linked = (document.parent / path_part).resolve() if path_part else document
            if not linked.exists():
                broken.append(f"{document.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{document.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []
