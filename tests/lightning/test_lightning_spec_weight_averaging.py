"""WeightAveraging and EMAWeightAveraging as Lightning's own tests specify them
(tests_pytorch/callbacks/test_weight_averaging.py), each scenario run under Lightning and here,
with only the imports changed, and compared: `n_averaged` at every epoch end, the module's and the
average's weights, an epoch-based `should_update`, the EMA options, a module built in
`configure_model`, and a run resumed after a crash against the uninterrupted run.

Not compared: the calls of Lightning's private `_swap_models`/`_copy_average_to_current` (no
user hook), and the multi-device and FSDP cases (several processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch import nn
from torch.optim.swa_utils import get_swa_avg_fn
from torch.utils.data import DataLoader
from trainer import Trainer
from callbacks import EMAWeightAveraging, ModelCheckpoint, WeightAveraging
from trainer.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset


class Model(BoringModel):
    def __init__(self, batch_norm=True):
        super().__init__()
        self.layer = nn.Sequential(nn.Linear(32, 8), *([nn.BatchNorm1d(8)] if batch_norm else []), nn.ReLU(),
                                   nn.Linear(8, 2))
        self.crash_on_epoch = None

    def training_step(self, batch, batch_idx):
        if self.crash_on_epoch and self.trainer.current_epoch >= self.crash_on_epoch:
            raise RuntimeError("CRASH")
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


class Built(BoringModel):
    def __init__(self):
        super().__init__()
        self.layer = None

    def configure_model(self):
        if self.layer is None:
            self.layer = nn.Sequential(nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 2))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class EMAFunction:
    def __init__(self, decay=0.9):
        self.decay = decay

    @torch.no_grad()
    def __call__(self, ema_param, current_param, num_averaged):
        return self.decay * ema_param + (1 - self.decay) * current_param


class Recording(WeightAveraging):
    def __init__(self, epochs=None, **kwargs):
        super().__init__(**kwargs)
        self.epochs, self.seen = epochs, []

    def should_update(self, step_idx=None, epoch_idx=None):
        if self.epochs is None:
            return super().should_update(step_idx, epoch_idx)
        return epoch_idx in self.epochs

    def on_train_epoch_end(self, trainer, module):
        super().on_train_epoch_end(trainer, module)
        self.seen.append((trainer.current_epoch, trainer.global_step, int(self._average_model.n_averaged)))


def weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def fit(root, model, callback, data, ckpt_path=None, checkpoints=False, epochs=3, val=None):
    if checkpoints:  # Lightning's default ModelCheckpoint, named (this Trainer adds none)
        callback = [callback, ModelCheckpoint(dirpath=root / "checkpoints")]
    trainer = Trainer(default_root_dir=root, logger=False, callbacks=callback, max_epochs=epochs,
                      num_sanity_val_steps=0, enable_checkpointing=checkpoints, enable_progress_bar=False,
                      enable_model_summary=False, accumulate_grad_batches=2, deterministic=True,
                      limit_val_batches=2 if val is None else val)
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=False), ckpt_path=ckpt_path)
    return trainer


def averaged(root, kind="ema", batch_norm=True, iterable=False, options=None):
    """Lightning: test_ema, test_swa (an epoch-based should_update), test_ema_weight_averaging*."""
    torch.manual_seed(0)
    model = Model(batch_norm=batch_norm)
    data = RandomIterableDataset(32, 32) if iterable else RandomDataset(32, 32)
    if kind == "ema":
        callback = Recording(avg_fn=EMAFunction())
    elif kind == "swa":
        callback = Recording(epochs=(1, 2), avg_fn=get_swa_avg_fn())
    else:
        callback = EMAWeightAveraging(**options)
    # An iterable dataset draws its samples while it is read; a validation's loader draws its
    # seed between them at another moment than Lightning's (docs/lightning.md): none here.
    trainer = fit(root, model, callback, data, val=0 if iterable else None)
    # After fit the module holds the average in both; Lightning's callback keeps a copy of it,
    # this one the training weights (docs/weight_averaging.md), so its copy is not compared.
    return dict(seen=getattr(callback, "seen", None), n=int(callback._average_model.n_averaged),
                weights=weights(model), same_module=trainer.lightning_module is model)


def built_in_configure_model(root):
    """Lightning: test_ema_configure_model."""
    torch.manual_seed(0)
    model, callback = Built(), Recording(avg_fn=EMAFunction())
    fit(root, model, callback, RandomDataset(32, 32), epochs=2)
    return type(callback._average_model.module.layer).__name__, weights(model), int(callback._average_model.n_averaged)


def resume(root, crash_on_epoch=1):
    """Lightning: test_ema_resume (a crashed run, resumed from its checkpoint, ends where the
    uninterrupted run ends)."""
    torch.manual_seed(0)
    data = RandomDataset(32, 32)
    whole = Model()
    crashing = Model()
    crashing.load_state_dict(whole.state_dict())
    fit(root / "whole", whole, Recording(avg_fn=EMAFunction()), data, epochs=4)
    crashing.crash_on_epoch = crash_on_epoch
    try:
        fit(root / "crash", crashing, Recording(avg_fn=EMAFunction()), data, checkpoints=True, epochs=4)
    except RuntimeError:
        pass
    files = sorted((root / "crash" / "checkpoints").iterdir())
    again = Model.load_from_checkpoint(files[0])
    callback = Recording(avg_fn=EMAFunction())
    fit(root / "crash", again, callback, data, ckpt_path=files[0], epochs=4)
    return [f.name for f in files], callback.seen, weights(whole), weights(again)


def schedule(root):
    """Lightning: test_ema_weight_averaging_should_update."""
    steps = EMAWeightAveraging(update_every_n_steps=5, update_starting_at_step=10)
    epochs = EMAWeightAveraging(update_every_n_steps=1, update_starting_at_epoch=3)
    return ([steps.should_update(step_idx=i) for i in range(0, 21)],
            [epochs.should_update(epoch_idx=i) for i in range(6)], [epochs.should_update(step_idx=i) for i in range(3)])
'''

SPEC = Spec(SOURCE, "spec_weight_averaging")


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
    dict(kind="ema"), dict(kind="ema", batch_norm=False, iterable=True), dict(kind="swa"),
    dict(kind="options", options=dict(decay=0.95, update_every_n_steps=5)),
    dict(kind="options", options=dict(decay=0.9, update_every_n_steps=1, update_starting_at_step=5)),
    dict(kind="options", options=dict(decay=0.9, update_starting_at_epoch=1)),
], ids=["ema", "ema_iterable", "swa_by_epoch", "ema_every_5", "ema_from_step", "ema_from_epoch"])
def test_weight_averaging(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("averaged", tmp_path, **options)
    assert same(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("scenario", ["built_in_configure_model", "schedule"])
def test_weight_averaging_scenarios(scenario: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare(scenario, tmp_path)
    assert same(ours, theirs), (ours, theirs)


def test_ema_resume_after_a_crash(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("resume", tmp_path, crash_on_epoch=2)
    assert same(ours[2], ours[3])  # the uninterrupted run's weights, bit for bit
    assert same(ours, theirs), (ours, theirs)
