"""The user docs (README.md and docs/*.md): links that resolve, tables that render, no working notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DELIMITER = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of the file outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _cells(row: str) -> int:
    """How many cells a table row has: `|` outside code spans, not escaped, splits them."""
    text = row.strip()
    text = re.sub(r"`[^`]*`", "code", text)  # a pipe inside a code span is still a separator in
    text = text.replace("\\|", "")  # GitHub's tables, but ours escape none: count code as one
    text = text.removeprefix("|").removesuffix("|")
    return text.count("|") + 1


def _tables(path: Path) -> list[tuple[int, list[tuple[int, str]]]]:
    """Each table as (line of its header, its rows including header and delimiter)."""
    lines = _prose(path)
    tables = []
    index = 0
    while index < len(lines) - 1:
        number, line = lines[index]
        if line.lstrip().startswith("|") and DELIMITER.match(lines[index + 1][1].strip()):
            rows = [lines[index], lines[index + 1]]
            index += 2
            while index < len(lines) and lines[index][1].lstrip().startswith("|") and lines[index][0] == rows[-1][0] + 1:
                rows.append(lines[index])
                index += 1
            tables.append((number, rows))
        else:
            index += 1
    return tables


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_relative_links_point_to_existing_files(path: Path):
    broken = []
    for number, line in _prose(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            file_part = target.split("#", 1)[0]
            if not (path.parent / file_part).exists():
                broken.append(f"{path.name}:{number}: {target}")
    assert broken == []


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_the_source_files_the_docs_name_exist(path: Path):
    named = re.findall(r"\b((?:trainer|callbacks|tests|benchmarks|examples)/[\w/.-]*\.(?:py|yaml|ipynb))\b", path.read_text(encoding="utf-8"))
    lightning = ("tests/tests_pytorch/",)  # Lightning's own repository, cited as the reference
    assert [name for name in named if not (ROOT / name).exists() and not name.startswith(lightning)] == []


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_tables_are_contiguous_and_rows_have_the_header_s_columns(path: Path):
    problems = []
    lines = _prose(path)
    by_number = {number: line for number, line in lines}
    for start, rows in _tables(path):
        width = _cells(rows[0][1])
        for number, row in rows:
            if _cells(row) != width:
                problems.append(f"{path.name}:{number}: {_cells(row)} cells, the header has {width}")
        # a row after a blank line that is not a new table's header was cut off from this table
        after = rows[-1][0] + 1
        while by_number.get(after, "x").strip() == "":
            after += 1
        following = by_number.get(after, "")
        next_line = by_number.get(after + 1, "")
        if after > rows[-1][0] + 1 and following.lstrip().startswith("|") and not DELIMITER.match(next_line.strip()):
            problems.append(f"{path.name}:{after}: a table row after a blank line (the table of line {start} is cut in two)")
    assert problems == []


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_user_docs_hold_no_working_notes(path: Path):
    text = path.read_text(encoding="utf-8")
    notes = [m.group(0) for m in re.finditer(r"\bissue\s+#?\d+|\bsessions?\b", text, flags=re.IGNORECASE)]
    assert notes == []


def test_the_checks_catch_what_they_look_for(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n[x](missing.md) in this session, see issue 12\n")
    assert len(_tables(page)) == 1
    with pytest.raises(AssertionError):
        test_tables_are_contiguous_and_rows_have_the_header_s_columns(page)
    with pytest.raises(AssertionError):
        test_relative_links_point_to_existing_files(page)
    with pytest.raises(AssertionError):
        test_user_docs_hold_no_working_notes(page)
