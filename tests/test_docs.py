"""The user docs (README.md and docs/*.md): links that resolve, tables that render, no working
notes; the README's snippet and the tutorial's files and commands run as written, and the
argument table is the Trainer's signature."""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer import Trainer

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


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    made hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    for _, line in _prose(path):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_anchors_of_links_name_a_heading_of_their_page(path: Path):
    broken = []
    for number, line in _prose(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or "#" not in target:
                continue
            file_part, anchor = target.split("#", 1)
            page = path if not file_part else path.parent / file_part
            if page.suffix == ".md" and page.exists() and anchor not in _anchors(page):
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
    # "the contract" is the project's own word for its promises: a reader never met it
    notes = [m.group(0) for m in re.finditer(r"\bissue\s+#?\d+|\bsessions?\b|\bcontract('s)?\b", text, flags=re.IGNORECASE)]
    assert notes == []


def test_the_checks_catch_what_they_look_for(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n[x](missing.md) in this session, see issue 12\n")
    contract = tmp_path / "contract.md"
    contract.write_text("Exactly the single-process step (see the contract).\n")
    with pytest.raises(AssertionError):
        test_user_docs_hold_no_working_notes(contract)
    assert len(_tables(page)) == 1
    with pytest.raises(AssertionError):
        test_tables_are_contiguous_and_rows_have_the_header_s_columns(page)
    with pytest.raises(AssertionError):
        test_relative_links_point_to_existing_files(page)
    with pytest.raises(AssertionError):
        test_user_docs_hold_no_working_notes(page)
    linked = tmp_path / "linked.md"
    linked.write_text("# Title\n\n## Other loggers: CSV, Weights & Biases\n\n## Step\n\n## Step\n\n"
                      "[a](#other-loggers-csv-weights--biases) [b](linked.md#step-1) [c](#title)\n")
    test_anchors_of_links_name_a_heading_of_their_page(linked)
    linked.write_text(linked.read_text() + "[d](linked.md#step-2)\n")
    with pytest.raises(AssertionError):
        test_anchors_of_links_name_a_heading_of_their_page(linked)


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _section(path: Path, heading: str) -> str:
    """The text under `## heading`, up to the next `## `."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_readme_is_a_first_page():
    readme = ROOT / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 130  # read in five minutes
    snippet = FENCE.findall(_section(readme, "Fifteen lines"))
    assert [language for language, _ in snippet] == ["python"]
    assert len([line for line in snippet[0][1].splitlines() if line.strip()]) <= 16
    links = {target for _, line in _prose(readme) for target in LINK.findall(line)}
    assert {"docs/tutorial.md", "docs/arguments.md", "docs/lightning.md", "docs/design.md"} <= links


def test_ci_runs_the_readme_s_test_command():
    """`.ci/run` installs what the README's second command installs and runs its pytest."""
    commands = FENCE.findall(_section(ROOT / "README.md", "Two commands"))[0][1]
    assert 'pip install torch==2.13.0 && pip install -e ".[examples]" && python examples/train_digits.py' in commands
    assert 'pip install torch==2.13.0 && pip install -e ".[dev]" && python -m pytest -q' in commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '"torch==2.13.0"' in ci and '-e ".[dev]"' in ci and "python -m pytest -q" in ci


def test_the_readme_s_fifteen_lines_run_and_write_what_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (_, code), = FENCE.findall(_section(ROOT / "README.md", "Fifteen lines"))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    run = tmp_path / "runs" / "default" / "version_0"
    assert (run / "last.ckpt").is_file()
    events = EventAccumulator(str(run))
    events.Reload()
    assert "train/loss" in events.Tags()["scalars"]  # as the text under the snippet says
    metrics = namespace["trainer"].callback_metrics  # type: ignore[attr-defined]
    assert metrics and all(isinstance(value, float) and value.item() == value for value in metrics.values())


def _argument_rows() -> dict[str, str]:
    """docs/arguments.md's table: argument name -> its default as written."""
    page = ROOT / "docs" / "arguments.md"
    (_, rows), = _tables(page)
    documented = {}
    for number, row in rows[2:]:
        names_cell, defaults_cell = [cell.strip() for cell in row.strip().strip("|").split(" | ")[:2]]
        names = re.findall(r"`([^`]+)`", names_cell)
        defaults = re.findall(r"`([^`]+)`", defaults_cell)
        assert len(defaults) in (1, len(names)), f"arguments.md:{number}: {len(names)} names, {len(defaults)} defaults"
        for index, name in enumerate(names):
            documented[name] = defaults[index if len(defaults) > 1 else 0]
    return documented


def test_the_argument_table_is_the_trainer_s_signature():
    parameters = {name: parameter for name, parameter in inspect.signature(Trainer.__init__).parameters.items()
                  if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD}
    documented = _argument_rows()
    assert sorted(set(parameters) - set(documented)) == []  # every argument has a row
    assert sorted(set(documented) - set(parameters)) == []  # every row is an argument
    wrong = {name: (written, parameters[name].default) for name, written in documented.items()
             if ast.literal_eval(written) != parameters[name].default}
    assert wrong == {}


TUTORIAL = ROOT / "docs" / "tutorial.md"
PROGRAMS = {"python": [sys.executable], "trainer": [sys.executable, "-m", "trainer"],
            "torchrun": [sys.executable, "-m", "torch.distributed.run"]}
NOT_RUN = {"tensorboard"}  # a server: it would not return


def _run_the_tutorial(folder: Path) -> dict[str, str]:
    """Write the tutorial's files and run its commands, in the page's order, as written;
    what each command printed (stdout and stderr), by command."""
    # this checkout's trainer, as an install would be; the CPU, as the page says (on a machine
    # with one GPU, two processes would need two)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    printed = {}
    for language, body in FENCE.findall(TUTORIAL.read_text(encoding="utf-8")):
        if language in ("python", "yaml"):
            first = body.splitlines()[0]
            assert re.fullmatch(r"# [\w.]+\.(py|yaml)", first), f"a {language} block that names no file: {first!r}"
            (folder / first[2:]).write_text(body, encoding="utf-8")
            continue
        assert language == "bash", f"a {language or 'plain'} block in the tutorial: what should the test do with it?"
        for line in filter(None, (line.strip() for line in body.splitlines())):
            program, *arguments = shlex.split(line)
            if program in NOT_RUN:
                continue
            assert program in PROGRAMS, f"the tutorial runs {program!r}: teach the test to run it"
            done = subprocess.run([*PROGRAMS[program], *arguments], cwd=folder, env=env, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            printed[line] = done.stdout + done.stderr
    return printed


def _checkpoint(run: Path) -> dict:
    return torch.load(run / "last.ckpt", weights_only=True)


@pytest.mark.slow
def test_the_tutorial_runs_as_written_and_does_what_it_says(tmp_path: Path):
    printed = _run_the_tutorial(tmp_path)
    assert list(printed) == [
        "python train.py", "trainer fit experiment.yaml", "trainer fit experiment.yaml --print_config",
        "trainer fit experiment.yaml --trainer.max_epochs 8 --ckpt_path last", "python tracked.py",
        "trainer fit experiment.yaml --trainer.devices 2",
        "torchrun --standalone --nproc_per_node=2 -m trainer fit experiment.yaml"]
    runs = tmp_path / "runs"
    # 2. 5 epochs of 28 batches; something was learned
    accuracy = re.search(r"validation accuracy (0\.\d+) after 140 steps", printed["python train.py"])
    assert accuracy and float(accuracy.group(1)) > 0.8, printed["python train.py"][-2000:]
    assert list((runs / "default" / "version_0").glob("events.out.tfevents*"))
    assert _checkpoint(runs / "default" / "version_0")["global_step"] == 140
    # 3. the YAML run and its resolved config; --print_config trains nothing
    assert (runs / "yaml" / "default" / "version_0" / "config.yaml").is_file()
    assert "max_epochs: 5" in printed["trainer fit experiment.yaml --print_config"]
    # 4. the resume continued version_0 from step 140 to 8 epochs
    resumed = printed["trainer fit experiment.yaml --trainer.max_epochs 8 --ckpt_path last"]
    assert "Resumed from runs/yaml/default/version_0/last.ckpt: epoch 5, optimizer step 140" in resumed, resumed[-2000:]
    assert _checkpoint(runs / "yaml" / "default" / "version_0")["global_step"] == 224
    # 5. TensorBoard and CSV side by side; a row every 14 steps, validation on every other one
    tracked = runs / "tracked" / "version_0"
    assert {"metrics.csv", "hparams.yaml", "last.ckpt"} <= {path.name for path in tracked.iterdir()}
    assert list(tracked.glob("events.out.tfevents*"))
    rows = [line.split(" ") for line in printed["python tracked.py"].splitlines() if re.fullmatch(r"\d+ \S+ \S+", line)]
    assert [int(step) for step, loss, acc in rows if loss != "-" and acc == "-"] == list(range(14, 141, 14))
    assert [int(step) for step, loss, acc in rows if loss == "-" and acc != "-"] == list(range(28, 141, 28))
    assert len(rows) == 15  # nothing else: one row per write
    # 6. devices=2 and torchrun: 14 steps an epoch, the same weights
    plain, launched = (_checkpoint(runs / "yaml" / "default" / f"version_{n}") for n in (1, 2))
    assert plain["global_step"] == launched["global_step"] == 70
    assert all(torch.equal(plain["module"][key], value) for key, value in launched["module"].items())
