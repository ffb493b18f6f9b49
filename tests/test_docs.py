"""The docs stay maps: short pages whose links lead somewhere, with the details one link down."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, (
        f"README.md has {len(lines)} lines (at most 150): move detail to docs/"
    )


def test_the_architecture_is_a_map() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    words = len(text.split())
    assert words <= 2000, (
        f"docs/ARCHITECTURE.md has {words} words (at most 2,000): move the detail to "
        "docs/architecture/ or the module's docstring"
    )
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 40  # the where-table is there
    for row in rows:
        for cell in re.split(r"(?<!\\)\|", row.strip("|")):
            assert len(cell.strip()) <= 200, f"a table cell over 200 characters: {cell[:60]}…"


def test_the_benchmarks_page_is_current_figures_only() -> None:
    lines = (DOCS / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, (
        f"docs/BENCHMARKS.md has {len(lines)} lines (at most 300): keep the latest table per "
        "benchmark there and the notebook in docs/bench-log/"
    )
    logs = {path.name for path in (DOCS / "bench-log").glob("*.md")} - {"README.md"}
    linked = set(re.findall(r"\(bench-log/([^)#]+)\)", "\n".join(lines)))
    assert logs <= linked, f"logs no entry links: {sorted(logs - linked)}"


def anchors(page: Path) -> set[str]:
    """The headings' anchors as GitHub makes them: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_links_between_pages_lead_somewhere(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        name, _, anchor = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.relative_to(ROOT)}: no heading for {target}"
