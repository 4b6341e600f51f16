"""A logger of one's own, written the Lightning way (`from trainer.loggers.logger import Logger,
rank_zero_experiment`): trained here and under Lightning 2.6 in one process, it receives the same
calls with the same values (hyperparameters, `save()` after each write, `finalize(status)`,
`after_save_checkpoint`), at the step every logger here gets (docs/lightning.md)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_weights, load_source

lightning = pytest.importorskip("lightning")

# ------------------------------------------------------------------ a logger of one's own
PROJECT = '''
import argparse
from pathlib import Path
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import ModelCheckpoint
from trainer.loggers.logger import Logger, rank_zero_experiment
from trainer.utilities import rank_zero_only


class Recorder(Logger):
    """A logger written the Lightning way: it records what it is given."""

    def __init__(self, save_dir):
        super().__init__()
        self._save_dir = save_dir
        self.calls = []

    @property
    def name(self):
        return "recorder"

    @property
    def version(self):
        return 3

    @property
    def save_dir(self):
        return self._save_dir

    @property
    @rank_zero_experiment
    def experiment(self):
        return self

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs):
        self.calls.append(("hyperparams", dict(vars(params) if isinstance(params, argparse.Namespace) else params)))

    @rank_zero_only
    def log_metrics(self, metrics, step=None):
        self.calls.append(("metrics", {k: float(v) for k, v in metrics.items()}, step))

    @rank_zero_only
    def save(self):
        self.calls.append(("save",))

    @rank_zero_only
    def finalize(self, status):
        self.calls.append(("finalize", status))

    def after_save_checkpoint(self, checkpoint_callback):
        self.calls.append(("checkpoint", Path(checkpoint_callback.best_model_path).name))


class Net(L.LightningModule):
    def __init__(self, lr=0.1, fail_at=None):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        if self.global_step == self.hparams.fail_at:
            raise RuntimeError("stop here")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(root, fail_at=None):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 3), torch.randn(16, 1))
    model = Net(fail_at=fail_at)
    logger = Recorder(str(root))
    trainer = L.Trainer(max_epochs=2, logger=logger, log_every_n_steps=2, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(root),
                        callbacks=[ModelCheckpoint(monitor="val_loss", filename="best-{epoch}")])
    try:
        trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    except RuntimeError:
        return {"logger": logger}
    fit_calls = len(logger.calls)
    trainer.validate(model, DataLoader(data, batch_size=8))
    return {"model": model, "trainer": trainer, "logger": logger, "fit_calls": fit_calls}


def fit_twice(root):
    torch.manual_seed(0)
    logger = Recorder(str(root))
    trainer = L.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(root))
    data = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
    trainer.fit(Net(lr=0.2), data)
    trainer.fit(Net(lr=0.3), data)
    return [c for c in logger.calls if c[0] in ("hyperparams", "finalize")]
'''


def _user_metrics(call: tuple[Any, ...]) -> tuple[Any, ...]:
    """A metrics call without the Trainer's own `train/...` scalars (written beside the user's here)."""
    if call[0] != "metrics":
        return call
    return ("metrics", {k: round(v, 6) for k, v in call[1].items() if not k.startswith("train/")}, call[2])


def _as_lightning_steps(calls: list[tuple[Any, ...]], fit_calls: int) -> list[tuple[Any, ...]]:
    """Our calls with the step Lightning writes: during fit, the step's 0-based index
    (`global_step - 1`, docs/lightning.md); after it, `global_step` in both."""
    return [("metrics", c[1], c[2] - 1) if c[0] == "metrics" and i < fit_calls else c for i, c in enumerate(calls)]


def test_a_logger_subclassing_Logger_gets_lightnings_calls(tmp_path):
    ours = load_source(textwrap.dedent(PROJECT), "ours", "recorder").main(tmp_path / "ours")
    theirs = load_source(textwrap.dedent(PROJECT), "lightning", "recorder").main(tmp_path / "lightning")
    assert_same_weights(ours["model"], theirs["model"])
    mine = _as_lightning_steps([_user_metrics(c) for c in ours["logger"].calls], ours["fit_calls"])
    expected = [_user_metrics(c) for c in theirs["logger"].calls]
    assert ("finalize", "success") in expected and ("hyperparams", {"lr": 0.1, "fail_at": None}) in expected
    saved = [c for c in expected if c[0] == "checkpoint"]
    assert saved and [c for c in mine if c[0] == "checkpoint"] == saved  # after_save_checkpoint, with the file's name
    # (here a checkpoint is written once the epoch's values are logged; Lightning writes it between the two)
    mine, expected = [c for c in mine if c[0] != "checkpoint"], [c for c in expected if c[0] != "checkpoint"]
    assert mine == expected  # hyperparameters, a save() after every write, the metrics, finalize: the same calls
    # the run's folder is save_dir/name/version_N, where Lightning puts the run's checkpoints/
    assert (tmp_path / "ours" / "recorder" / "version_3" / "last.ckpt").is_file()
    assert (tmp_path / "lightning" / "recorder" / "version_3" / "checkpoints").is_dir()


DICT_LOGGER = '''
import collections
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from trainer.loggers.logger import Logger
from trainer.utilities import rank_zero_only


class DictLogger(Logger):
    """A real project's logger (metrics kept in a dict), as written for Lightning."""

    def __init__(self):
        super(DictLogger).__init__()
        self.logged_metrics = collections.defaultdict(list)

    @property
    def name(self):
        return "DictLogger"

    @property
    def version(self):
        return "0.1"

    @rank_zero_only
    def log_hyperparams(self, params):
        pass

    @rank_zero_only
    def log_metrics(self, metrics, step):
        for key, val in metrics.items():
            self.logged_metrics[key].append(val)

    @rank_zero_only
    def save(self):
        pass

    @rank_zero_only
    def finalize(self, status):
        pass


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def main(root):
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(32, 3), torch.randn(32, 1)), batch_size=4)
    logger = DictLogger()
    L.Trainer(max_epochs=3, logger=logger, log_every_n_steps=4, enable_progress_bar=False, enable_model_summary=False,
              enable_checkpointing=False, default_root_dir=str(root)).fit(Net(), data, data)
    return {key: [float(v) for v in values] for key, values in logger.logged_metrics.items()}
'''


def test_a_real_projects_dict_logger_holds_lightnings_values(tmp_path):
    ours = load_source(DICT_LOGGER, "ours", "dict_logger").main(tmp_path / "ours")
    theirs = load_source(DICT_LOGGER, "lightning", "dict_logger").main(tmp_path / "lightning")
    assert set(theirs) == {"train_loss", "val_loss", "epoch"}
    assert {key: ours[key] for key in theirs} == theirs


def test_each_fit_gives_a_logger_of_ones_own_the_hyperparameters_as_lightning(tmp_path):
    ours = load_source(textwrap.dedent(PROJECT), "ours", "recorder").fit_twice(tmp_path / "ours")
    theirs = load_source(textwrap.dedent(PROJECT), "lightning", "recorder").fit_twice(tmp_path / "lightning")
    assert [c for c in theirs if c[0] == "hyperparams"] == [("hyperparams", {"lr": 0.2, "fail_at": None}),
                                                           ("hyperparams", {"lr": 0.3, "fail_at": None})]
    assert ours == theirs


def test_a_failed_fit_finalizes_the_logger_as_failed_as_lightning(tmp_path):
    ours = load_source(textwrap.dedent(PROJECT), "ours", "recorder").main(tmp_path / "ours", fail_at=3)
    theirs = load_source(textwrap.dedent(PROJECT), "lightning", "recorder").main(tmp_path / "lightning", fail_at=3)
    assert theirs["logger"].calls[-1] == ("finalize", "failed")
    assert ours["logger"].calls[-1] == ("finalize", "failed")


def test_a_logger_of_ones_own_in_a_list_gets_its_calls_and_the_others_theirs(tmp_path):
    from torch.utils.data import DataLoader

    import trainer
    from trainer.demos.boring_classes import BoringModel, RandomDataset
    from trainer.loggers import CSVLogger

    project = load_source(textwrap.dedent(PROJECT), "ours", "recorder")
    recorder = project.Recorder(str(tmp_path))

    class Net(BoringModel):
        def __init__(self, width=32):
            super().__init__()
            self.save_hyperparameters()

        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("loss", out["loss"])
            return out

    fit = trainer.Trainer(max_epochs=1, limit_train_batches=4, log_every_n_steps=2, enable_progress_bar=False,
                          logger=[CSVLogger(tmp_path), recorder], root_dir=tmp_path)
    fit.fit(Net(), DataLoader(RandomDataset(32, 16), batch_size=4))
    calls = recorder.calls
    assert calls[:2] == [("hyperparams", {"width": 32}), ("save",)] and calls[-1] == ("finalize", "success")
    metrics = [i for i, c in enumerate(calls) if c[0] == "metrics"]
    assert [c[2] for c in calls if c[0] == "metrics"] == [2, 4] and all(calls[i + 1] == ("save",) for i in metrics)
    assert "width" in (Path(fit.log_dir) / "hparams.yaml").read_text()  # the CSV logger still gets the run's own


def test_logger_base_class_is_lightnings(monkeypatch, tmp_path):
    from trainer.loggers.logger import DummyLogger, Logger, rank_zero_experiment
    from trainer.utilities import rank_zero_only

    class Missing(Logger):
        name, version = "x", 0

        def log_hyperparams(self, params, *args, **kwargs): ...

    with pytest.raises(TypeError, match="log_metrics"):  # abstract, as Lightning's
        Missing()
    assert not isinstance("tensorboard", Logger)

    class Duck:  # the logger's methods, its folder set on the instance: a logger, as before
        def __init__(self):
            self.log_dir = "runs"

        def log_metrics(self, metrics, step): ...

        def log_hyperparams(self, params, metrics=None): ...

        def flush(self): ...

        def close(self): ...

    assert isinstance(Duck(), Logger)
    dummy = DummyLogger()
    dummy.log_metrics({"a": 1.0}, 1)
    dummy.anything(1, key=2)
    dummy.experiment.add_scalar("a", 1.0)
    assert dummy[0] is dummy
    assert not hasattr(dummy, "continue_run") and not hasattr(dummy, "__deepcopy__")  # not a run to continue

    import copy

    from trainer import Trainer

    copy.deepcopy(dummy)
    Trainer(logger=DummyLogger(), max_steps=1, enable_progress_bar=False, root_dir=tmp_path).fit(
        _boring(), torch.utils.data.DataLoader(_random(32, 8), batch_size=4))

    class Experiments(Missing):
        def log_metrics(self, metrics, step=None): ...

        @property
        @rank_zero_experiment
        def experiment(self):
            return "the writer"

    assert Experiments().experiment == "the writer"
    monkeypatch.setattr(rank_zero_only, "rank", 1)  # another rank: an object that takes any call
    other = Experiments().experiment
    assert other != "the writer" and other.add_image("x", 1) is other


def _boring() -> Any:
    from trainer.demos.boring_classes import BoringModel

    return BoringModel()


def _random(size: int, length: int) -> Any:
    from trainer.demos.boring_classes import RandomDataset

    return RandomDataset(size, length)
