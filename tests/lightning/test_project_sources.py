"""Each Lightning-style project differs from its Lightning twin in its import lines only.

The projects in tests/helpers/lightning_projects are written with this package's imports;
`lightning_source` rewrites those lines to Lightning's and nothing else, which is what makes
the comparisons in tests/lightning/test_parity_*.py say "only the imports changed".
"""

from __future__ import annotations

import difflib
import re

import pytest

from tests.helpers.lightning_projects import PROJECTS, lightning_source, project_path


def test_the_projects_are_found() -> None:
    assert {"boring", "gan", "autoencoder", "classifier", "resume", "hydra_config"} <= set(PROJECTS)


@pytest.mark.parametrize("name", PROJECTS)
def test_only_the_import_lines_differ(name: str) -> None:
    ours = project_path(name).read_text()
    theirs = lightning_source(ours)
    # the project really runs on this package (`cli_lightning_logo` is a name both packages have)
    assert "lightning" not in ours.replace("cli_lightning_logo", "")
    changed = [line for line in difflib.ndiff(ours.split("\n"), theirs.split("\n")) if line[:2] in ("- ", "+ ")]
    assert changed, "the project imports nothing from this package"
    for line in changed:
        assert line[2:].lstrip().startswith(("import ", "from ")), f"not an import line: {line!r}"
    assert len(ours.split("\n")) == len(theirs.split("\n"))
    assert not re.search(r"^\s*(import|from) (trainer|callbacks)\b", theirs, re.MULTILINE)
    assert all("lightning" in line for line in changed if line.startswith("+ "))


def test_a_line_no_rule_maps_is_refused() -> None:
    with pytest.raises(ValueError, match="no Lightning mapping"):
        lightning_source("from trainer.loops import fit")
