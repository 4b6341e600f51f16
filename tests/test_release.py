"""What a run holds is let go when it is no longer needed: the checkpoint it resumed from once
it is restored (its tensors are mapped from the file, not copied), and the module, the
Trainer and what they hold as soon as the last reference goes, without the cyclic garbage
collector (on a GPU that is the run's memory)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from tests.reference import TinyNet, loader, make_data
from trainer import Callback, Trainer

QUIET = dict(logger=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class Watch(Callback):
    """Takes a weak reference to a tensor of the checkpoint fit resumes from (the first
    weight, which restore copies into the model) and records, at every batch, whether it is alive."""

    def __init__(self) -> None:
        self.ref: Any = None
        self.alive: list[bool] = []

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        if self.ref is None:
            self.ref = weakref.ref(next(iter(checkpoint["module"].values())))

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.alive.append(self.ref is not None and self.ref() is not None)


class SaveAt(Callback):
    def __init__(self, step: int, path: Any) -> None:
        self.step, self.path = step, path

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


@pytest.mark.parametrize("stop", [3, 10])  # inside epoch 0 (a second restore after its start hooks), at its end
def test_the_resumed_checkpoint_is_let_go_once_restored(tmp_path, stop):
    path = tmp_path / "mid.ckpt"
    torch.manual_seed(0)
    Trainer(max_steps=stop, enable_checkpointing=False, callbacks=[SaveAt(stop, path)], **QUIET).fit(
        TinyNet(dropout=0.0), loader(make_data(), shuffle=False))
    watch = Watch()
    trainer = Trainer(max_epochs=2, enable_checkpointing=False, callbacks=[watch], **QUIET)
    gc.disable()  # freed by reference counting, not by a collection
    try:
        trainer.fit(TinyNet(dropout=0.0), loader(make_data(), shuffle=False), ckpt_path=path)
    finally:
        gc.enable()
    assert watch.ref is not None and watch.alive and not any(watch.alive)


def test_checkpoints_are_loaded_memory_mapped(tmp_path, monkeypatch):
    path = tmp_path / "x.ckpt"
    trainer = Trainer(max_steps=2, enable_checkpointing=False, **QUIET)
    trainer.fit(TinyNet(dropout=0.0), loader(make_data(), shuffle=False))
    trainer.save_checkpoint(path)
    seen: list[dict[str, Any]] = []
    original = torch.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    Trainer(max_steps=3, enable_checkpointing=False, **QUIET).fit(TinyNet(dropout=0.0), loader(make_data()), ckpt_path=path)
    assert seen and all(kwargs.get("mmap") is True and kwargs.get("weights_only") is True for kwargs in seen)
