"""A resume inside an epoch with another batch size or accumulation never skips or repeats
samples silently: the position is converted (with a warning) when that is exact, kept (with a
warning) when it still names the same sample, and refused with an error that says what to do
otherwise. An epoch-boundary resume may change either without a word."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.helpers.checkpoints import scramble_global_rng, shuffled, trainer
from tests.helpers.reference import TinyNet, make_data
from trainer import Callback
from trainer.checkpoint import CheckpointError, load_checkpoint

SAMPLES = 48  # batches of 4: 12 per epoch; of 8: 6


class Recording(TinyNet):
    """Keeps every training sample it is given, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].clone())
        return super().training_step(batch, batch_idx)

    def samples(self) -> torch.Tensor:
        return torch.cat(self.seen)


def model(seed: int = 0) -> Recording:
    torch.manual_seed(seed)
    return Recording()


def run(root: Path, batch_size: int = 4, *, k: int = 1, ckpt: Path | None = None, callbacks: tuple[Any, ...] = (),
        **limits: Any) -> tuple[Recording, Any]:
    if ckpt is None:
        module = model()
        torch.manual_seed(1)
    else:
        scramble_global_rng()
        module = model(seed=99)
    limits.setdefault("max_epochs", 2)
    fit = trainer(root, accumulate_grad_batches=k, callbacks=list(callbacks), **limits)
    fit.fit(module, shuffled(make_data(SAMPLES), batch_size=batch_size), ckpt_path=ckpt)
    return module, fit


def stopped(tmp_path: Path, batch_size: int, max_steps: int, k: int = 1) -> Path:
    _, first = run(tmp_path / "first", batch_size, k=k, max_steps=max_steps)
    return first.log_dir / "last.ckpt"


def test_changed_accumulation_warns_and_sees_the_same_samples(tmp_path):
    reference, _ = run(tmp_path / "full", k=2)
    path = stopped(tmp_path, 4, max_steps=6 + 3, k=2)  # epoch 0 takes 6 steps; 6 batches into epoch 1
    assert load_checkpoint(path)["loop"]["batches_done"] == 6
    with pytest.warns(UserWarning, match="accumulate_grad_batches=2") as caught:
        resumed, fit = run(tmp_path / "resumed", k=4, ckpt=path)
    message = str(next(w.message for w in caught if "accumulate_grad_batches" in str(w.message)))
    assert str(path) in message and "6 batches into epoch 1" in message
    assert "windows of 4 micro-batches start at the resume point" in message
    assert torch.equal(resumed.samples(), reference.samples()[(SAMPLES + 6 * 4):])
    assert fit.global_step == 9 + 2  # the epoch's last 6 micro-batches: windows of 4 and 2


@pytest.mark.parametrize(("old", "new", "done"), [(4, 8, 6), (8, 4, 3), (4, 12, 9)])
def test_changed_batch_size_converts_the_position_when_exact(tmp_path, old, new, done):
    reference, _ = run(tmp_path / "full", old)
    per_epoch = SAMPLES // old
    path = stopped(tmp_path, old, max_steps=per_epoch + done)
    with pytest.warns(UserWarning, match=f"batch_size={old}") as caught:
        resumed, fit = run(tmp_path / "resumed", new, ckpt=path)
    message = str(next(w.message for w in caught if "batch_size=" in str(w.message)))
    consumed = done * old
    assert str(path) in message and f"resumes after batch {consumed // new} of {new}" in message
    # Exactly the samples the uninterrupted run saw after that point, in the same order.
    assert torch.equal(resumed.samples(), reference.samples()[SAMPLES + consumed:])
    assert fit.global_step == per_epoch + done + (SAMPLES - consumed) // new


def test_changed_batch_size_that_would_split_a_batch_is_refused(tmp_path):
    path = stopped(tmp_path, 4, max_steps=12 + 5)  # 20 samples into epoch 1: not a whole number of 8s
    with pytest.raises(CheckpointError) as caught:
        run(tmp_path / "resumed", 8, ckpt=path)
    message = str(caught.value)
    for part in (str(path), "5 batches into epoch 1", "batch_size=4", "batch_size=8", "20 samples",
                 "not a whole number of batches of 8", "Resume with batch_size=4", "epoch boundary"):
        assert part in message, part


class Stream(IterableDataset):
    def __iter__(self):
        data = make_data(SAMPLES)
        for index in torch.randperm(SAMPLES).tolist():
            yield data[index]

    def __len__(self) -> int:
        return SAMPLES


def test_changed_batch_size_of_an_iterable_dataset_is_refused(tmp_path):
    first = trainer(tmp_path / "first", max_epochs=2, max_steps=12 + 4)
    first.fit(model(), DataLoader(Stream(), batch_size=4))
    with pytest.raises(CheckpointError, match="IterableDataset decides its own order") as caught:
        trainer(tmp_path / "resumed", max_epochs=2).fit(model(), DataLoader(Stream(), batch_size=8),
                                                        ckpt_path=first.log_dir / "last.ckpt")
    assert "batch_size=4" in str(caught.value) and "batch_size=8" in str(caught.value)


def test_an_epoch_boundary_resume_may_change_both_silently(tmp_path):
    path = stopped(tmp_path, 4, max_steps=12)  # max_steps at an epoch's end: an epoch boundary
    assert load_checkpoint(path)["loop"]["batches_done"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, fit = run(tmp_path / "resumed", 8, k=2, ckpt=path)
    assert fit.global_step == 12 + 3


class SaveAtEpochStart(Callback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if not self.path.exists():
            trainer.save_checkpoint(self.path)


def test_a_checkpoint_written_right_after_a_converted_resume_is_in_the_new_unit(tmp_path):
    path = stopped(tmp_path, 4, max_steps=12 + 6)
    again = tmp_path / "again.ckpt"
    with pytest.warns(UserWarning, match="batch_size=4"):
        converted, _ = run(tmp_path / "resumed", 8, ckpt=path, callbacks=(SaveAtEpochStart(again),))
    saved = load_checkpoint(again)  # written before the epoch's iterator existed
    assert saved["loop"]["batches_done"] == 3 and saved["data"][0]["batch_size"] == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same batch size now: nothing to say
        resumed, _ = run(tmp_path / "resumed_again", 8, ckpt=again)
    assert torch.equal(resumed.samples(), converted.samples())
