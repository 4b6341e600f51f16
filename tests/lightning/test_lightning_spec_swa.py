"""StochasticWeightAveraging as Lightning's own tests specify it
(tests_pytorch/callbacks/test_stochastic_weight_avg.py), each scenario run under Lightning and here,
with only the imports changed, and compared: the scheduler the Trainer holds in the SWA window,
`n_averaged` at each epoch end, the calls of the overridable `update_parameters` and
`transfer_weights`, the learning rates, the weights, the warning for a step-interval scheduler,
the refused arguments, and a run resumed after a crash.

Not compared: the private loop flags Lightning's test reads (`fit_loop._skip_backward`, the
patched `strategy.backward` count), and the extra epoch Lightning runs for a model with
BatchNorm (a deliberate difference, docs/lightning.md: here that pass runs when training ends,
so `current_epoch`, `global_step` and the epoch hooks count one less); the BatchNorm cases
compare what a user sees beside that. DDP and sharded strategies need several processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import logging
import warnings
import torch
from torch import nn
from torch.optim.swa_utils import SWALR
from torch.utils.data import DataLoader
from trainer import Trainer
from callbacks import StochasticWeightAveraging
from trainer.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


class SwaModel(BoringModel):
    def __init__(self, batchnorm=True, interval="epoch", iterable=False, crash_on_epoch=None, scheduler="step"):
        super().__init__()
        layers = [nn.Linear(32, 8)] + ([nn.BatchNorm1d(8)] if batchnorm else []) + [nn.ReLU(), nn.Linear(8, 2)]
        self.layer = nn.Sequential(*layers)
        self.interval, self.iterable, self.crash_on_epoch, self.scheduler = interval, iterable, crash_on_epoch, scheduler

    def training_step(self, batch, batch_idx):
        if self.crash_on_epoch and self.trainer.current_epoch >= self.crash_on_epoch:
            raise RuntimeError("SWA crash test")
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        torch.manual_seed(3)  # the same data in a resumed run
        return DataLoader((RandomIterableDataset(32, 10) if self.iterable else RandomDataset(32, 10)), batch_size=2)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.layer.parameters(), lr=0.1)
        if self.scheduler is None:
            return optimizer
        if self.scheduler == "lambda":
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.1, -1)
        else:
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.interval}}


class Counting(StochasticWeightAveraging):
    """Lightning's SwaTestCallback, reading only what a user can."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.update_calls, self.transfer_calls, self.seen = 0, 0, []

    def update_parameters(self, *args, **kwargs):
        self.update_calls += 1
        return StochasticWeightAveraging.update_parameters(*args, **kwargs)

    def transfer_weights(self, *args, **kwargs):
        self.transfer_calls += 1
        return StochasticWeightAveraging.transfer_weights(*args, **kwargs)

    def on_train_epoch_start(self, trainer, module):
        super().on_train_epoch_start(trainer, module)
        configs = trainer.lr_scheduler_configs
        self.seen.append(("start", trainer.current_epoch, [type(c.scheduler).__name__ for c in configs],
                          [(c.interval, c.frequency) for c in configs],
                          [g["lr"] for g in trainer.optimizers[0].param_groups]))

    def on_train_epoch_end(self, trainer, module):
        super().on_train_epoch_end(trainer, module)
        self.seen.append(("end", trainer.current_epoch, None if self.n_averaged is None else int(self.n_averaged)))


def weights(module):
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def train(root, batchnorm=False, interval="epoch", iterable=False, scheduler="step", accumulate=2):
    """Lightning: test_swa_callback, test_swa_callback_scheduler_step (train_with_swa)."""
    torch.manual_seed(0)
    model = SwaModel(batchnorm=batchnorm, interval=interval, iterable=iterable, scheduler=scheduler)
    swa = Counting(swa_epoch_start=2, swa_lrs=0.1)
    trainer = Trainer(default_root_dir=root, max_epochs=4, limit_train_batches=4, limit_val_batches=0,
                      accumulate_grad_batches=accumulate, callbacks=[swa], **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    warned = [w.category.__name__ for w in caught if "epoch" in str(w.message) and "SWA" in str(w.message).upper()]
    return dict(seen=[s for s in swa.seen if s[1] < 4], update_calls=swa.update_calls,
                transfer_calls=swa.transfer_calls, n_averaged=int(swa.n_averaged), weights=weights(model),
                accumulate=trainer.accumulate_grad_batches, batches=trainer.num_training_batches,
                swa_start=swa.swa_start, swa_end=swa.swa_end, warned=warned, lightning_module=trainer.lightning_module is model)


def swapping_logged(root):
    """Lightning: test_swa_warns (the swap is logged at INFO)."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep(level=logging.INFO)
    loggers = [logging.getLogger(), logging.getLogger("lightning.pytorch")]  # Lightning's does not propagate
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        trainer = Trainer(default_root_dir=root, fast_dev_run=True, callbacks=StochasticWeightAveraging(swa_lrs=1e-2),
                          **{k: v for k, v in QUIET.items() if k != "logger"})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(SwaModel(interval="step"))
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)
    return sorted({m for m in records if "Swapping scheduler" in m})


def refused(root):
    """Lightning: test_swa_raises."""
    out = []
    for options in (dict(swa_epoch_start=0, swa_lrs=0.1), dict(swa_epoch_start=1.5, swa_lrs=0.1),
                    dict(swa_epoch_start=-1, swa_lrs=0.1), dict(swa_lrs=-0.1), dict(swa_lrs=[0.1, -0.2]),
                    dict(swa_lrs=0.1, avg_fn=3), dict(swa_lrs=0.1, device=3)):
        try:
            StochasticWeightAveraging(**options)
            out.append(False)
        except Exception:  # Lightning's MisconfigurationException; ours a ValueError
            out.append(True)
    return out


def multiple_lrs(root):
    """Lightning: test_swa_multiple_lrs (each group's initial_lr and swa_lr)."""
    seen = []

    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.layer1, self.layer2 = nn.Linear(32, 8), nn.Linear(8, 2)

        def forward(self, x):
            return self.layer2(self.layer1(x))

        def configure_optimizers(self):
            return torch.optim.Adam([{"params": self.layer1.parameters(), "lr": 0.1},
                                     {"params": self.layer2.parameters(), "lr": 0.2}])

        def on_train_epoch_start(self):
            seen.append([(g["lr"], g["initial_lr"], g["swa_lr"]) for g in self.trainer.optimizers[0].param_groups])

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, callbacks=StochasticWeightAveraging(swa_lrs=[0.123, 0.321]),
                      fast_dev_run=1, **{k: v for k, v in QUIET.items() if k != "logger"})
    trainer.fit(model)
    return seen, weights(model)


def resume(root, crash_on_epoch=1, scheduler="step"):
    """Lightning: test_swa_resume_training_from_checkpoint (..._custom_scheduler): a run that
    crashed resumes from its last epoch-end checkpoint and ends where an uninterrupted one ends."""
    from callbacks import ModelCheckpoint
    kwargs = dict(default_root_dir=root, max_epochs=4, limit_train_batches=4, limit_val_batches=0,
                  accumulate_grad_batches=2, logger=False, enable_progress_bar=False, enable_model_summary=False)
    torch.manual_seed(0)
    model = SwaModel(batchnorm=False, crash_on_epoch=crash_on_epoch, scheduler=scheduler)
    ckpt = ModelCheckpoint(dirpath=root / "checkpoints")
    trainer = Trainer(callbacks=[Counting(swa_epoch_start=3, swa_lrs=0.1), ckpt], **kwargs)
    try:
        trainer.fit(model)
        crashed = None
    except RuntimeError as error:
        crashed = str(error)
    files = sorted(p.name for p in (root / "checkpoints").iterdir())
    torch.manual_seed(1)
    again = SwaModel(batchnorm=False, scheduler=scheduler)
    swa = Counting(swa_epoch_start=3, swa_lrs=0.1)
    trainer = Trainer(callbacks=[swa], **dict(kwargs, enable_checkpointing=False))
    trainer.fit(again, ckpt_path=root / "checkpoints" / files[-1])
    return dict(crashed=crashed, files=files, seen=swa.seen, update_calls=swa.update_calls,
                transfer_calls=swa.transfer_calls, weights=weights(again), n_averaged=int(swa.n_averaged),
                epoch=trainer.current_epoch, step=trainer.global_step)


def infinite(root):
    """Lightning: test_swa_with_infinite_epochs_and_batchnorm (max_epochs=-1, max_steps)."""
    torch.manual_seed(0)
    model = SwaModel(batchnorm=True)
    swa = StochasticWeightAveraging(swa_lrs=0.1, swa_epoch_start=2)
    trainer = Trainer(default_root_dir=root, max_epochs=-1, max_steps=12, limit_train_batches=5, limit_val_batches=0,
                      callbacks=[swa], **QUIET)
    trainer.fit(model)
    return dict(max_epochs=trainer.fit_loop.max_epochs, step=trainer.global_step, n_averaged=int(swa.n_averaged),
                weights=weights(model))
'''

SPEC = Spec(SOURCE, "spec_swa")


def same(ours: Any, theirs: Any) -> bool:
    """`==` that compares tensors with `torch.equal`, through dicts, lists and tuples."""
    if isinstance(ours, torch.Tensor) or isinstance(theirs, torch.Tensor):
        return isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and torch.equal(ours, theirs)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    return bool(ours == theirs)


@pytest.mark.parametrize("options", [
    dict(), dict(interval="step"), dict(scheduler=None), dict(iterable=True, accumulate=1),
], ids=["epoch", "step_interval", "no_scheduler", "iterable"])
def test_swa_run(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("train", tmp_path, **options)
    if options.get("scheduler", "step") is None:
        # Left as it is: without a scheduler of the module's, Lightning appends SWALR's config to
        # `trainer.lr_scheduler_configs`; here the callback steps SWALR itself and the list stays
        # empty. The learning rates, the average and the weights are the same.
        assert [s[2:4] for s in theirs["seen"] if s[0] == "start" and s[1] >= 2] == [(["SWALR"], [("epoch", 1)])] * 2
        for record in (ours, theirs):
            record["seen"] = [s[:2] + s[4:] if s[0] == "start" else s for s in record["seen"]]
    assert same(ours, theirs), (ours, theirs)


def test_swa_run_with_batch_norm(tmp_path: Path) -> None:
    """Lightning's extra epoch (a deliberate difference) adds an epoch start and end to its record."""
    ours, theirs = SPEC.compare("train", tmp_path, batchnorm=True)
    assert same(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("scenario", ["swapping_logged", "refused", "multiple_lrs", "infinite"])
def test_swa(scenario: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare(scenario, tmp_path)
    assert same(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("options", [dict(crash_on_epoch=1), dict(crash_on_epoch=3, scheduler="lambda")],
                         ids=["before_the_window", "inside_the_window"])
def test_swa_resume_after_a_crash(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("resume", tmp_path, **options)
    assert same(ours, theirs), (ours, theirs)
