"""Resume is bit-exact under every kind of loader and every way a run stops.

Loader kinds x stop points x interrupt kinds: each interrupted run is resumed from its
last.ckpt into a fresh process state and must end with the uninterrupted run's weights
(torch.equal), or, where exactness is impossible, the resume warns with the reason.
"""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, WeightedRandomSampler

from tests.helpers.reference import TinyNet, assert_same_weights
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint

QUIET = dict(logger=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")
EPOCHS, BATCHES = 2, 10


class Noisy(Dataset):
    """40 samples; each read adds fresh torch noise (random augmentation in __getitem__)."""

    def __init__(self, n: int = 40, interrupt_at: int | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 6, generator=g), torch.randn(n, 1, generator=g)
        self.reads, self.interrupt_at = 0, interrupt_at

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        if self.reads == self.interrupt_at:
            raise KeyboardInterrupt  # Ctrl-C while the loader produces a batch
        return self.x[i] + 0.01 * torch.randn(6), self.y[i]


class NoisyStream(IterableDataset):
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        shard = range(40)[info.id :: info.num_workers] if info is not None else range(40)
        data = Noisy()
        for i in shard:
            yield data[i]


def make_loader(kind: str, interrupt_at: int | None = None) -> Any:
    data = Noisy(interrupt_at=interrupt_at)
    if kind == "shuffle-generator":
        return DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))
    if kind == "shuffle":
        return DataLoader(data, batch_size=4, shuffle=True)
    if kind == "replacement":
        return DataLoader(data, batch_size=4, sampler=RandomSampler(data, replacement=True, num_samples=40))
    if kind == "weighted":
        return DataLoader(data, batch_size=4, sampler=WeightedRandomSampler(torch.linspace(0.1, 1, 40), 40))
    if kind == "drop-last":
        return DataLoader(Noisy(43), batch_size=4, shuffle=True, drop_last=True)  # 10 batches
    if kind == "sequential":
        return DataLoader(data, batch_size=4)
    if kind == "workers":
        return DataLoader(data, batch_size=4, shuffle=True, num_workers=2)
    if kind == "persistent-workers":
        return DataLoader(data, batch_size=4, shuffle=True, num_workers=2, persistent_workers=True)
    if kind == "iterable-workers":
        return DataLoader(NoisyStream(), batch_size=4, num_workers=2)
    if kind == "stateful":
        stateful = pytest.importorskip("torchdata.stateful_dataloader")
        return stateful.StatefulDataLoader(data, batch_size=4, shuffle=True)
    raise AssertionError(kind)


def new_model() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet()  # dropout: every step draws from torch's generator


def uninterrupted(kind: str) -> TinyNet:
    model = new_model()
    torch.manual_seed(1)
    Trainer(max_epochs=EPOCHS, enable_checkpointing=False, **QUIET).fit(model, make_loader(kind))
    return model


class At(Callback):
    def __init__(self, step: int, action: Callable[[], None]) -> None:
        self.step, self.action = step, action

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.step:
            self.action()


def ctrl_c() -> None:
    raise KeyboardInterrupt


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def interrupted(kind: str, how: str, step: int, root: Path) -> Path:
    model = new_model()
    torch.manual_seed(1)
    callbacks: list[Callback] = []
    options: dict[str, Any] = {}
    if how == "max_steps":
        options["max_steps"] = step
    else:
        callbacks.append(At(step, ctrl_c if how == "ctrl-c" else sigterm))
    run = Trainer(max_epochs=EPOCHS, callbacks=callbacks, root_dir=root, **QUIET, **options)
    try:
        run.fit(model, make_loader(kind))
    except KeyboardInterrupt:
        assert how == "ctrl-c"
    return run.log_dir / "last.ckpt"


def resume(kind: str, path: Path) -> TinyNet:
    torch.manual_seed(123)  # the checkpoint's random state must win
    model = TinyNet()
    Trainer(max_epochs=EPOCHS, enable_checkpointing=False, **QUIET).fit(model, make_loader(kind), ckpt_path=path)
    return model


FAST = ["shuffle-generator", "shuffle", "replacement", "weighted", "drop-last", "sequential", "stateful"]
SLOW = ["workers", "iterable-workers"]


@pytest.mark.parametrize("step", [7, BATCHES, BATCHES + 3], ids=["mid-epoch", "epoch-last-batch", "second-epoch"])
@pytest.mark.parametrize("how", ["max_steps", "sigterm", "ctrl-c"])
@pytest.mark.parametrize("kind", FAST)
def test_resume_is_exact(tmp_path: Path, kind: str, how: str, step: int):
    path = interrupted(kind, how, step, tmp_path)
    assert load_checkpoint(path)["cut"]["clean"] is True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = resume(kind, path)
    ours = [str(w.message) for w in caught if "bit-identical" in str(w.message) or "clean cut" in str(w.message)]
    assert ours == []  # a clean cut resumes without a warning
    assert_same_weights(uninterrupted(kind), resumed)


@pytest.mark.parametrize("step", [7, BATCHES], ids=["mid-epoch", "epoch-last-batch"])
@pytest.mark.parametrize("kind", SLOW)
def test_resume_with_worker_processes_is_exact(tmp_path: Path, kind: str, step: int):
    path = interrupted(kind, "max_steps", step, tmp_path)
    assert_same_weights(uninterrupted(kind), resume(kind, path))


def test_persistent_workers_resume_warns_why_it_is_not_exact(tmp_path: Path):
    path = interrupted("persistent-workers", "max_steps", BATCHES, tmp_path)
    with pytest.warns(UserWarning, match="persistent_workers=True"):
        resume("persistent-workers", path)


def test_stateful_loader_stopped_on_the_last_batch_keeps_the_next_epoch(tmp_path: Path):
    """It used to resume into an empty epoch counted as done: 20 steps instead of 30."""
    pytest.importorskip("torchdata.stateful_dataloader")
    path = interrupted("stateful", "max_steps", BATCHES, tmp_path)
    run = Trainer(max_epochs=3, enable_checkpointing=False, **QUIET)
    run.fit(new_model(), make_loader("stateful"), ckpt_path=path)
    assert run.global_step == 30


def test_ctrl_c_while_a_batch_is_loaded_is_marked_and_resume_warns(tmp_path: Path):
    model = new_model()
    torch.manual_seed(1)
    run = Trainer(max_epochs=EPOCHS, root_dir=tmp_path, **QUIET)
    with pytest.raises(KeyboardInterrupt):
        run.fit(model, make_loader("shuffle", interrupt_at=4 * 6 + 2))  # inside batch 6's loading
    saved = load_checkpoint(run.log_dir / "last.ckpt")
    assert saved["cut"]["clean"] is False and "producing a batch" in saved["cut"]["reason"]
    assert saved["loop"]["global_step"] == 6
    with pytest.warns(UserWarning, match="not written at a clean cut"):
        resume("shuffle", run.log_dir / "last.ckpt")


def test_a_second_ctrl_c_while_the_first_is_handled_still_writes_last_ckpt(tmp_path: Path):
    """The second SIGINT lands exactly between the first KeyboardInterrupt and the save."""
    delivered = []

    class Twice(Callback):
        def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
            if trainer.global_step == 3:
                os.kill(os.getpid(), signal.SIGINT)  # the first: raises KeyboardInterrupt here

        def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
            delivered.append(type(exception).__name__)
            os.kill(os.getpid(), signal.SIGINT)  # the second, before fit has saved anything

    run = Trainer(max_epochs=EPOCHS, callbacks=[Twice()], root_dir=tmp_path, **QUIET)
    with pytest.raises(KeyboardInterrupt):
        run.fit(new_model(), make_loader("shuffle"))
    assert delivered == ["KeyboardInterrupt"]
    saved = load_checkpoint(run.log_dir / "last.ckpt")
    assert saved["loop"]["global_step"] == 3 and saved["cut"]["clean"] is True
