"""Every pointer to a section of the docs names a heading that exists, so code can cite `docs/design.md#…`.

Checked: markdown links `[text](page.md#anchor)` in docs/ and README.md, and bare `docs/page.md#anchor` citations in
any source or doc file. Anchors are GitHub's: the heading lower-cased, punctuation dropped, spaces turned to hyphens.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("server", "tao_sdk", "integrations", "tests", "docs", "README.md")
SUFFIXES = {".py", ".md", ".ts"}
MARKDOWN_LINK = re.compile(r"\]\(([\w./-]*\.md)?#([\w-]+)\)")
BARE_CITATION = re.compile(r"(?<![\w/])(?<!\]\()(docs/[\w-]+\.md)#([\w-]+)")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def files() -> list[Path]:
    """The files that may cite a section, this one left out (it cites missing ones on purpose)."""
    found: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES and "node_modules" not in p.parts]
    return [path for path in found if path != Path(__file__).resolve()]


def citations(path: Path) -> list[tuple[int, Path, str]]:
    """(line, page, anchor) of every pointer into a page section that `path` makes."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        found += [(number, ROOT / page, anchor) for page, anchor in BARE_CITATION.findall(line)]
        if path.suffix == ".md":
            found += [
                (number, (path.parent / page) if page else path, anchor) for page, anchor in MARKDOWN_LINK.findall(line)
            ]
    return found


def broken(paths: list[Path]) -> list[str]:
    cache: dict[Path, set[str]] = {}
    bad = []
    for path in paths:
        for number, page, anchor in citations(path):
            page = page.resolve()
            if page not in cache:
                cache[page] = anchors(page) if page.is_file() else set()
            if anchor not in cache[page]:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                bad.append(f"{where}:{number}: {page.name}#{anchor}")
    return bad


def test_the_design_document_is_cited_from_the_code():
    cited = {anchor for path in files() for _, page, anchor in citations(path) if page.name == "design.md"}
    assert {"one-core-two-drivers", "session-life-cycle", "planning-without-stopping-the-world"} <= cited


def test_every_cited_section_exists():
    assert broken(files()) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"""Planner (docs/design.md#planning-without-stopping-the-world)."""\n', []),
        ('"""Planner (docs/design.md#planning-without-stopping-the-world-2)."""\n', ["design.md#planning-without"]),
        ('"""Gone (docs/no-such-page.md#anything)."""\n', ["no-such-page.md#anything"]),
    ],
)
def test_the_check_itself_catches_a_missing_section(tmp_path, text, expected):
    module = tmp_path / "probe.py"
    module.write_text(text, encoding="utf-8")
    found = broken([module])
    assert len(found) == len(expected)
    assert all(part in line for part, line in zip(expected, found, strict=True))
