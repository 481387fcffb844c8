"""docs/scheduling.md's plugin and profile tables are generated from the plugins' docstrings."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_gateway.scheduling import doc_tables
from cluster_gateway.scheduling.registry import BUILTIN


def test_the_committed_page_is_a_fresh_generation() -> None:
    assert doc_tables.main(["--check"]) == 0, "run `python -m cluster_gateway.scheduling.doc_tables`"


@pytest.mark.parametrize("type_name", sorted(BUILTIN))
def test_every_builtin_plugin_documents_itself(type_name: str) -> None:
    doc = (BUILTIN[type_name].__doc__ or "").strip()
    assert len(doc) > 30, f"{type_name}: its docstring is its documentation"
    page = doc_tables.DOC_PATH.read_text()
    assert f"| `{type_name}` |" in page and f"#### `{type_name}`" in page


def test_a_stale_page_is_flagged_and_regenerated(tmp_path: Path) -> None:
    page = tmp_path / "scheduling.md"
    page.write_text(
        doc_tables.DOC_PATH.read_text().replace("| `kv_raw` | score |", "| `kv_raw` | score, pick |")
    )
    assert doc_tables.main(["--check", "--out", str(page)]) == 1
    assert doc_tables.main(["--out", str(page)]) == 0
    assert page.read_text() == doc_tables.DOC_PATH.read_text()


def test_a_page_without_the_block_gets_it_appended(tmp_path: Path) -> None:
    page = tmp_path / "new.md"
    page.write_text("# Intro\n")
    assert doc_tables.main(["--out", str(page)]) == 0
    text = page.read_text()
    assert (
        text.startswith("# Intro\n\n" + doc_tables.BEGIN)
        and doc_tables.main(["--check", "--out", str(page)]) == 0
    )
