"""Two Lightning-style projects that move by their imports alone (tests/helpers/lightning_projects):

- `hparams_hierarchy`: a base class and two levels of subclasses, `save_hyperparameters` at two
  levels (the child's `ignore=` dropping a name the base saved), the best checkpoint rebuilt
  with `load_from_checkpoint` and tested;
- `train_loss_monitor`: a user's `train/loss` logged as an epoch mean (and per step too),
  watched by `ModelCheckpoint` and `EarlyStopping`, with `callback_metrics` held across `test`.

Both run under Lightning and ours in this process: the same weights (torch.equal),
hyperparameters, metrics, monitored values and files.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.helpers.lightning_projects import both, lightnings_values
from tests.helpers.reference import assert_same_weights

pytest.importorskip("lightning")


def columns(text: str, skip: tuple[str, ...] = ("step", "epoch")) -> dict[str, list[str]]:
    rows = list(csv.DictReader(io.StringIO(text)))
    return {k: [row[k] for row in rows if row[k]] for k in rows[0] if k not in skip} if rows else {}


def test_parent_and_child_hyperparameters(tmp_path: Path) -> None:
    ours, theirs = both("hparams_hierarchy", tmp_path)
    assert_same_weights(ours["model"], theirs["model"])
    assert_same_weights(ours["best_model"], theirs["best_model"])
    for key in ("hparams", "hparams_initial", "saved_hparams", "best_hparams"):
        assert list(ours[key].items()) == list(theirs[key].items()), key
    assert ours["hparams"]["scale"] == 0.25 and ours["hparams"]["depth"] == 3  # the grandchild's own and its default
    assert "log_name" not in ours["hparams"] and "verbose" not in ours["hparams"]  # the child's ignore=
    assert ours["best"] == theirs["best"] and ours["files"] == theirs["files"]
    lightnings_values(ours["val"], theirs["val"])
    assert ours["test"] == theirs["test"]


@pytest.mark.parametrize("on_step", [False, True], ids=["epoch_mean", "step_and_epoch"])
def test_a_users_train_loss_is_monitored(on_step: bool, tmp_path: Path) -> None:
    ours, theirs = both("train_loss_monitor", tmp_path, on_step=on_step)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch
    assert 0 < theirs["stopped_epoch"] == ours["stopped_epoch"]  # EarlyStopping on the epoch mean stopped both
    for key in ("seen", "best", "best_score", "best_k", "files", "objective", "test"):
        assert ours[key] == theirs[key], key
    lightnings_values(ours["val"], theirs["val"])
    lightnings_values(ours["kept"], theirs["kept"])  # callback_metrics held since fit: fit's values after test
    assert "test/loss" not in ours["kept"]
    mine, other = columns(ours["csv"]), columns(theirs["csv"])
    # every column Lightning writes, with its values in order; a per-step column may have one more
    # value: a run that ends between logging steps writes its last step too (docs/lightning.md)
    assert {k: mine.get(k, [])[:len(v)] if k.endswith("_step") else mine.get(k) for k, v in other.items()} == other
    assert all(len(mine[k]) <= len(v) + 1 for k, v in other.items())
