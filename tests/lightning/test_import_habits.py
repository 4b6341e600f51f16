"""Lightning's attribute paths after `import lightning.pytorch as pl` work after `import trainer as pl`.

A Lightning script often never imports a subpackage by name: it writes
`pl.loggers.TensorBoardLogger(...)`, `pl.utilities.rank_zero_only`, `pl.strategies.DDPStrategy`,
`pl.tuner.Tuner` or `pl.callbacks.EarlyStopping` right after `import lightning.pytorch as pl`, where
those names are loaded with the package. They are read in a fresh interpreter here, each before
anything imports its subpackage by name.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Lightning's spelling after `import lightning.pytorch as pl` -> the object it names here
PATHS = {
    "pl.callbacks.EarlyStopping": "callbacks.EarlyStopping",
    "pl.loggers.TensorBoardLogger": "trainer.loggers.TensorBoardLogger",
    "pl.loggers.CSVLogger": "trainer.loggers.CSVLogger",
    "pl.utilities.rank_zero_only": "trainer.utilities.rank_zero_only",
    "pl.strategies.DDPStrategy": "trainer.strategies.DDPStrategy",
    "pl.tuner.Tuner": "trainer.tuner.Tuner",
}


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})


def test_lightning_s_attribute_paths_name_our_objects() -> None:
    reads = "".join(f"found[{s!r}] = {s}\n" for s in PATHS)
    checks = "".join(f"assert found[{s!r}] is {t}, {s!r}\n" for s, t in PATHS.items())
    done = _run(f"import trainer as pl\nfound = {{}}\n{reads}"
                f"import callbacks, trainer.loggers, trainer.utilities, trainer.strategies, trainer.tuner\n{checks}")
    assert done.returncode == 0, done.stderr


def test_lightning_has_these_paths() -> None:
    """The spellings above are Lightning's own (so the test asks for what Lightning scripts write)."""
    pl = pytest.importorskip("lightning.pytorch")
    for spelling in PATHS:
        obj = pl
        for part in spelling.split(".")[1:]:
            obj = getattr(obj, part)


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    done = _run("import trainer\ntry:\n    trainer.nope\nexcept AttributeError as e:\n    print(e)\n")
    assert done.returncode == 0 and "'nope'" in done.stdout, done.stderr


def test_lightning_s_callback_module_paths_import_the_same_classes() -> None:
    """`from lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint` (a module of the
    callbacks package) reads `from trainer.callbacks.model_checkpoint import ModelCheckpoint` here."""
    done = _run("from trainer.callbacks.model_checkpoint import ModelCheckpoint\n"
                "from trainer.callbacks.progress import TQDMProgressBar\n"
                "import trainer.callbacks.early_stopping as early_stopping\n"
                "import callbacks, callbacks.model_checkpoint\n"
                "assert ModelCheckpoint is callbacks.ModelCheckpoint and TQDMProgressBar is callbacks.TQDMProgressBar\n"
                "assert early_stopping is callbacks.early_stopping\n"
                "import trainer\n"
                "assert trainer.callbacks.model_checkpoint is callbacks.model_checkpoint\n")
    assert done.returncode == 0, done.stderr
    pl = pytest.importorskip("lightning.pytorch.callbacks.model_checkpoint")
    assert pl.ModelCheckpoint.__name__ == "ModelCheckpoint"
