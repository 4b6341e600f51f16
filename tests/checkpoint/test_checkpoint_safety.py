"""Every file the Trainer writes loads again with torch.load(weights_only=True); what can't be
stored that way fails the save at once, naming the entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers.reference import TinyNet, loader, make_data
from trainer import Trainer
from trainer.checkpoint import CheckpointError, load_checkpoint


class NumpyHyperparameters(TinyNet):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=np.float64(0.05), momentum=np.float32(0.9))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=np.int64(7))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def test_numpy_scalars_in_optimizer_and_scheduler_state_are_stored_as_numbers(tmp_path: Path):
    import callbacks

    every = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=3, save_top_k=-1)
    run = Trainer(max_epochs=1, root_dir=tmp_path, callbacks=[every], enable_progress_bar=False, device="cpu")
    run.fit(NumpyHyperparameters(), loader(make_data()))
    run.save_checkpoint(tmp_path / "manual.ckpt")
    written = sorted(tmp_path.rglob("*.ckpt"))
    assert len(written) >= 4  # last.ckpt, manual.ckpt and ModelCheckpoint's files
    for path in written:
        state = torch.load(path, weights_only=True)  # raises on anything but plain data
        assert isinstance(state["schedulers"][0]["state"]["T_max"], int)
        assert state["lr_schedulers"][0] is state["schedulers"][0]["state"]  # Lightning's key: the same object
    resumed = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    resumed.fit(NumpyHyperparameters(), loader(make_data()), ckpt_path=tmp_path / "manual.ckpt")
    assert resumed.global_step == 20


def test_a_value_that_could_not_be_loaded_fails_the_save_naming_it(tmp_path: Path):
    class Odd(TinyNet):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["extra"] = {"seen": {1, 2}}

    run = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    run.fit(Odd(), loader(make_data()))
    with pytest.raises(CheckpointError, match=r"checkpoint\['extra'\]\['seen'\] is a builtins.set") as caught:
        run.save_checkpoint(tmp_path / "odd.ckpt")
    assert str(tmp_path / "odd.ckpt") in str(caught.value)
    assert not (tmp_path / "odd.ckpt").exists()


def test_numpy_arrays_become_tensors(tmp_path: Path):
    class WithArray(TinyNet):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["stats"] = np.arange(3.0)

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.loaded = checkpoint["stats"]

    run = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    run.fit(WithArray(), loader(make_data()))
    run.save_checkpoint(tmp_path / "a.ckpt")
    assert torch.equal(load_checkpoint(tmp_path / "a.ckpt")["stats"], torch.arange(3.0, dtype=torch.float64))


@pytest.mark.parametrize(
    ("damage", "text"),
    [
        (lambda s: s.pop("module"), "no 'module' entry"),
        (lambda s: s.pop("loop"), "no 'loop' entry"),
        (lambda s: s.pop("precision"), "no 'precision' entry"),
        (lambda s: s.update(rng=[]), "'rng' is empty"),
        (lambda s: s["loop"].pop("global_step"), "'loop' lacks global_step"),
        (lambda s: s.update(module=[1, 2]), "'module' is a list"),
    ],
)
def test_a_file_with_the_marker_but_missing_parts_is_refused_by_name(tmp_path: Path, damage, text):
    from trainer.checkpoint import save_atomic

    run = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    run.fit(TinyNet(), loader(make_data()))
    path = run.save_checkpoint(tmp_path / "whole.ckpt")
    state = torch.load(path, weights_only=True)
    damage(state)
    broken = save_atomic(state, tmp_path / "broken.ckpt")
    model = TinyNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match="incomplete") as caught:
        Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu").fit(
            model, loader(make_data()), ckpt_path=broken
        )
    assert text in str(caught.value) and str(broken) in str(caught.value)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # nothing touched


def test_a_scheduler_of_another_class_is_refused_naming_both(tmp_path: Path):
    class Step(TinyNet):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.05)
            return opt, torch.optim.lr_scheduler.StepLR(opt, 2)

    class Cosine(TinyNet):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.05)
            return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, 5)

    run = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    run.fit(Step(), loader(make_data()))
    path = run.save_checkpoint(tmp_path / "step.ckpt")
    with pytest.raises(CheckpointError, match="saved from a StepLR, but this run's is a CosineAnnealingLR"):
        Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu").fit(
            Cosine(), loader(make_data()), ckpt_path=path
        )


@pytest.mark.parametrize(
    "failure",
    [OSError(28, "No space left on device"), RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 448 vs 342")],
    ids=["ENOSPC", "torch-unexpected-pos"],
)
def test_a_full_disk_is_named_and_the_previous_file_stays(tmp_path: Path, monkeypatch, failure):
    run = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    run.fit(TinyNet(), loader(make_data()))
    path = run.save_checkpoint(tmp_path / "x.ckpt")
    before = path.read_bytes()

    def full(*args: Any, **kwargs: Any) -> None:
        raise failure

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match="could not be written") as caught:
        run.save_checkpoint(path)
    assert str(path) in str(caught.value) and ("disk is full" in str(caught.value) or "full disk" in str(caught.value))
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["x.ckpt"]
