"""The docs as references a newcomer reads in an afternoon: no page over 500 lines (testing.md
over 300), every link to a page or file of the project resolves, and docs/serving-front.md's
table of the gateway's modules names every module of ftgateway/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
LIMITS = {"testing.md": 300}


def long_pages(pages: list[Path], limit: int = 500) -> list[str]:
    return [f"{p.name}: {n} lines" for p in pages if (n := len(p.read_text().splitlines())) > LIMITS.get(p.name, limit)]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Markdown links to files of the project (not http, not an anchor alone) that do not exist."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        path = target.split("#", 1)[0]
        if not path or "://" in path or path.startswith("mailto:"):
            continue
        if not (page.parent / path).exists():
            found.append(f"{page.relative_to(root)}: {target}")
    return found


def module_rows(page: Path) -> set[str]:
    return set(re.findall(r"^\| `(\w+)\.py` \|", page.read_text(), re.MULTILINE))


def test_no_page_is_longer_than_a_reference_should_be():
    assert long_pages(PAGES) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_to_the_project_resolves(page):
    assert broken_links(page) == []


def test_the_module_table_names_every_gateway_module():
    modules = {p.stem for p in (ROOT / "ftgateway").glob("*.py") if p.stem != "__init__"}
    assert modules, "no modules found"
    assert module_rows(ROOT / "docs" / "serving-front.md") >= modules, sorted(modules - module_rows(
        ROOT / "docs" / "serving-front.md"))  # fmt: skip


def test_the_checks_find_a_long_page_a_broken_link_and_a_missing_module(tmp_path):
    page = tmp_path / "testing.md"
    page.write_text("x\n" * 301 + "[there](missing.md#a) [ok](testing.md) [web](https://example.com)\n")
    assert long_pages([page]) == ["testing.md: 302 lines"]
    other = tmp_path / "other.md"
    other.write_text("x\n" * 302 + "| `app.py` | the routes |\n")
    assert long_pages([other]) == []
    assert module_rows(other) == {"app"}
    assert broken_links(page, tmp_path) == ["testing.md: missing.md#a"]
