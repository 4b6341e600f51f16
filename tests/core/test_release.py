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

from tests.helpers.reference import TinyNet, loader, make_data
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


def _fit_and_forget(**options: Any) -> tuple[weakref.ref[Any], weakref.ref[Any]]:
    model = TinyNet(dropout=0.0)
    trainer = Trainer(max_epochs=1, **options)
    trainer.fit(model, loader(make_data(40)), loader(make_data(8)))
    return weakref.ref(model), weakref.ref(trainer)


@pytest.mark.parametrize("options", [
    dict(logger=False, enable_checkpointing=False, enable_progress_bar=False),
    dict(),  # TensorBoard, progress bar, last.ckpt
    dict(compile={"backend": "eager"}, logger=False, enable_checkpointing=False, enable_progress_bar=False),
    dict(precision="amp", logger=False, enable_checkpointing=False, enable_progress_bar=False),
])
def test_a_finished_run_is_freed_without_the_garbage_collector(tmp_path, options):
    _fit_and_forget(root_dir=tmp_path / "warm", num_sanity_val_steps=0, device="cpu", **options)  # imports, caches
    gc.collect()
    gc.disable()
    try:
        model, trainer = _fit_and_forget(root_dir=tmp_path, num_sanity_val_steps=0, device="cpu", **options)
        assert trainer() is None and model() is None
    finally:
        gc.enable()


DDP_SCRIPT = """
import gc, os, weakref
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
from tests.helpers.reference import TinyNet, loader, make_data
from trainer import Trainer

def run():
    model = TinyNet(dropout=0.0)
    trainer = Trainer(max_epochs=1, device="cpu", strategy="ddp", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0)
    trainer.fit(model, loader(make_data(40)))
    return weakref.ref(model), weakref.ref(trainer)

run(); gc.collect(); gc.disable()
model, trainer = run()
print("freed" if model() is None and trainer() is None else "alive")
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_a_finished_ddp_run_is_freed_without_the_garbage_collector(tmp_path):
    """The DistributedDataParallel wrapper's back-reference from the step module is dropped at
    teardown (a one-process Gloo group, in its own process)."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PORT": str(port), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", DDP_SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "freed"
