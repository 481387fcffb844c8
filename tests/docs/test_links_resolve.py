"""Every relative link in the README and docs/ resolves to a file inside this repository (and an
`#anchor` to a heading of that file): a reader of a fresh clone never follows a link into nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!\\)!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def _links(text: str) -> list[str]:
    text = FENCE.sub("", text)  # links inside code blocks are code, not links
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repo(doc: Path) -> None:
    broken = []
    for target in _links(doc.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...: not a file
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_checker_sees_links_and_rejects_escapes(tmp_path: Path) -> None:
    text = "see [a](docs/x.md#y-z), ![img](p.png), `[not](code.md)`\n```\n[nor](this.md)\n```\n"
    assert _links(text) == ["docs/x.md#y-z", "p.png"]
    assert _slug("Data-plane capacity (`fleetgate bench throughput`)") == (
        "data-plane-capacity-fleetgate-bench-throughput"
    )
    assert not (ROOT / "../shared/DESIGN.md").resolve().is_relative_to(ROOT)


def test_the_readme_stays_short() -> None:
    """Reference text belongs in docs/; the README is what a newcomer reads first."""
    assert len((ROOT / "README.md").read_bytes()) <= 8 * 1024
