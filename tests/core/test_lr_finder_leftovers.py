"""Nothing of a learning-rate sweep is found by a later run: the module's own callbacks do not
run in it, it writes no file in the user's run folders (SLURM's `slurm-<job>` folder included),
no logger step, and every loader (persistent workers included) is left as it was."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from callbacks import LearningRateFinder, ModelCheckpoint
from tests.helpers.reference import TinyNet, assert_same_weights, make_data, make_model
from trainer import Callback, Trainer
from trainer.datamodule import DataModule
from trainer.loggers import CSVLogger
from trainer.tuner import Tuner, lr_find

LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
          "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODELIST", "SLURM_JOB_NAME")


class Counter(Callback):
    """Counts the fits it sees start."""

    def __init__(self) -> None:
        self.fits = 0

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        self.fits += 1


class WithOwnCallbacks(TinyNet):
    """A module whose configure_callbacks() brings a ModelCheckpoint (writing to the run folder)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counter = Counter()

    def configure_callbacks(self) -> Any:
        return [ModelCheckpoint(), self.counter]

    def on_fit_start(self) -> None:
        notes = Path(self.trainer.log_dir) / "notes.txt"  # a file of the module's own in the run folder
        notes.parent.mkdir(parents=True, exist_ok=True)
        notes.write_text("started\n")


def _model() -> WithOwnCallbacks:
    torch.manual_seed(0)
    return WithOwnCallbacks(lr=0.05)


def _data() -> DataLoader:
    return DataLoader(make_data(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))


def _files(root: Path) -> list[str]:
    """Every file under `root` (TensorBoard's event files by their folder: their names hold a time)."""
    return sorted(str(p.parent.relative_to(root) / "events") if p.name.startswith("events.out.tfevents")
                  else str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def in_slurm_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SLURM batch job of one task: the run folder is `slurm-<job>`, the same on every rerun."""
    for name in LAUNCH:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "777")


@pytest.mark.parametrize("slurm", [False, True])
def test_tuner_sweep_leaves_nothing_a_later_run_can_find(tmp_path: Path, request: Any, slurm: bool) -> None:
    if slurm:
        request.getfixturevalue("in_slurm_job")
    quiet = dict(enable_progress_bar=False, enable_model_summary=False, device="cpu", max_epochs=2)
    model = _model()
    trainer = Trainer(root_dir=tmp_path / "swept", **quiet)
    Tuner(trainer).lr_find(model, train_dataloaders=_data(), num_training=12, update_attr=False)
    assert _files(tmp_path) == []  # nothing written in the user's run folders
    assert model.counter.fits == 0  # the module's callbacks took no part in the sweep
    trainer.fit(model, _data(), ckpt_path="last")  # the same command a requeue runs: starts fresh
    plain = _model()
    Trainer(root_dir=tmp_path / "plain", **quiet).fit(plain, _data(), ckpt_path="last")
    assert_same_weights(plain, model)
    assert model.counter.fits == 1
    assert _files(tmp_path / "swept") == _files(tmp_path / "plain")


def test_callback_sweep_leaves_no_checkpoint_and_no_logger_step(tmp_path: Path, in_slurm_job: None) -> None:
    def run(root: Path, finder: bool) -> tuple[WithOwnCallbacks, Trainer]:
        model = _model()
        callbacks = [LearningRateFinder(num_training_steps=12, update_attr=False)] if finder else []
        trainer = Trainer(root_dir=root, logger=CSVLogger(root), callbacks=callbacks, max_epochs=2,
                          enable_progress_bar=False, enable_model_summary=False, device="cpu")
        trainer.fit(model, _data())
        return model, trainer

    swept, swept_trainer = run(tmp_path / "a", True)
    plain, plain_trainer = run(tmp_path / "b", False)
    assert swept.counter.fits == 1
    assert_same_weights(plain, swept)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")  # the same checkpoints (names: steps), nothing more
    steps = [[row["step"] for row in csv.DictReader(open(next(t.log_dir.rglob("metrics.csv"))))]
             for t in (swept_trainer, plain_trainer)]
    assert steps[0] == steps[1]  # no step of the sweep in the logger
    fresh = make_model()
    assert not torch.equal(fresh.net[0].weight, swept.net[0].weight)  # it did train


def test_fit_after_a_sweep_on_persistent_workers_is_as_without_it() -> None:
    """The sweep's worker iterator (and the base seed it drew) is not what the next fit reuses."""
    def run(sweep: bool) -> TinyNet:
        model = make_model()
        data = DataLoader(make_data(), batch_size=4, shuffle=True, num_workers=1, persistent_workers=True)
        trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, device="cpu")
        torch.manual_seed(1)
        if sweep:
            lr_find(trainer, model, data, num_training=6)
            assert data._iterator is None  # as the sweep found it: no workers of its own left behind
        trainer.fit(model, data)
        return model

    assert_same_weights(run(False), run(True))


class _SeededData(DataModule):
    """A datamodule whose loaders draw from its own generator (train: through a batch sampler),
    with persistent workers in both loaders."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(5)

    def train_dataloader(self) -> DataLoader:
        sampler = BatchSampler(RandomSampler(make_data(), generator=self.generator), batch_size=4, drop_last=False)
        return DataLoader(make_data(), batch_sampler=sampler, num_workers=1, persistent_workers=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(make_data(11, seed=1), batch_size=4, num_workers=1, persistent_workers=True)


@pytest.mark.parametrize("callback", [False, True])
def test_fit_after_a_sweep_on_a_datamodule_with_its_own_generator_is_as_without_it(callback: bool) -> None:
    """The datamodule's generator (not the loader's: it makes a new loader on every call) is put back too."""
    def run(sweep: bool) -> TinyNet:
        model = make_model()
        data = _SeededData()
        finder = [LearningRateFinder(num_training_steps=6, update_attr=False)] if sweep and callback else []
        trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, device="cpu", callbacks=finder)
        torch.manual_seed(1)
        if sweep and not callback:
            Tuner(trainer).lr_find(model, datamodule=data, num_training=6, update_attr=False)
        trainer.fit(model, datamodule=data)
        return model

    assert_same_weights(run(False), run(True))


def test_the_same_command_with_a_finder_that_sets_the_lr_continues_its_run(tmp_path: Path) -> None:
    """The finder's suggestion replaces the module's `lr` hyperparameter: the checkpoint still names the
    experiment by the value the module was built with, so the rerun (a requeue) continues the run."""
    def run(root: Path, epochs: int, seed: int = 0) -> tuple[TinyNet, Trainer]:
        torch.manual_seed(seed)
        model = TinyNet(lr=0.01)
        finder = LearningRateFinder(num_training_steps=20, max_lr=0.05, update_attr=True)
        trainer = Trainer(root_dir=root, max_epochs=epochs, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, device="cpu", callbacks=[finder])
        trainer.fit(model, _data(), ckpt_path="last")
        return model, trainer

    full, full_trainer = run(tmp_path / "full", 2)
    assert full.hparams["lr"] != 0.01  # the suggestion was set
    run(tmp_path / "cut", 1)
    resumed, trainer = run(tmp_path / "cut", 2, seed=5)  # other initial weights: the checkpoint's win
    assert trainer.log_dir == tmp_path / "cut" / "default" / "version_0" and trainer.global_step == 20
    assert trainer.optimizers[0].param_groups[0]["lr"] == full_trainer.optimizers[0].param_groups[0]["lr"]
    assert_same_weights(full, resumed)
