"""Which items a run asks its loaders for, under Lightning and under ours, in one process.

No loader is asked for a batch the run will not train (or evaluate) on: with an int or a
fractional `limit_train_batches`, `max_steps`, `max_time`, a requested stop, `fast_dev_run`,
the evaluation limits and `num_sanity_val_steps`, for map-style datasets and for iterable
ones with and without `len()`. Fetching one more moves torch's generator when the dataset
augments at random in the main process, so every later epoch would differ.

Where the length is known (`len()`, or an int limit) Lightning reads exactly the batches it
uses, and so do we: the lists are equal. For an iterable without `len()` Lightning reads one
batch ahead (to know an epoch's last batch), so a stop inside its epoch has read one batch it
never trains on; we read each batch just before training it, as a hand-written loop does, which
keeps every step a clean cut for an exact resume (docs/lightning.md, deliberate differences).
"""

from __future__ import annotations

import time
import warnings
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

pytest.importorskip("lightning")

ITEMS, BATCH = 8, 2


def frameworks() -> dict[str, ModuleType]:
    import lightning

    import trainer

    return {"ours": trainer, "lightning": lightning}


class Reads:
    """Every item a dataset was asked for, and every item a step used, in order."""

    def __init__(self) -> None:
        self.read: list[tuple[str, int]] = []
        self.used: list[tuple[str, int]] = []


class MapItems(Dataset):
    def __init__(self, reads: Reads, tag: str) -> None:
        self.reads, self.tag = reads, tag

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> torch.Tensor:
        self.reads.read.append((self.tag, index))
        return torch.full((2,), float(index)) + torch.rand(2)  # random augmentation in the main process


class StreamItems(IterableDataset):
    def __init__(self, reads: Reads, tag: str) -> None:
        self.reads, self.tag = reads, tag

    def __iter__(self) -> Any:
        for index in range(ITEMS):
            self.reads.read.append((self.tag, index))
            yield torch.full((2,), float(index)) + torch.rand(2)


class SizedStreamItems(StreamItems):
    def __len__(self) -> int:
        return ITEMS


KINDS = {"map": MapItems, "stream": StreamItems, "sized_stream": SizedStreamItems}


def build(L: ModuleType, reads: Reads) -> tuple[Any, type]:
    """The module and a stop-requesting callback class written against framework `L`."""

    def used(batch: torch.Tensor, tag: str) -> None:
        reads.used.extend((tag, int(value)) for value in batch[:, 0].floor().tolist())

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            used(batch, "train")
            return self.layer(batch).sum()

        def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
            used(batch, "val")
            self.log("v", self.layer(batch).sum())

        def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
            used(batch, "test")
            self.log("t", self.layer(batch).sum())

        def predict_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            used(batch, "predict")
            return self.layer(batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Stop(L.Callback):
        """should_stop after optimizer step `at`; or, with `sleep`, a pause there past max_time."""

        def __init__(self, at: int, sleep: float = 0.0) -> None:
            self.at, self.sleep = at, sleep

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == self.at:
                if self.sleep:
                    time.sleep(self.sleep)
                else:
                    trainer.should_stop = True

    return Model, Stop


#: name -> (Trainer arguments, stop-callback arguments or None, stage, validation loader in fit)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any] | None, str, bool]] = {
    "whole_epochs": ({}, None, "fit", False),
    "limit_int": ({"limit_train_batches": 2}, None, "fit", False),
    "limit_fraction": ({"limit_train_batches": 0.5}, None, "fit", False),
    "limit_with_accumulation": ({"limit_train_batches": 3, "accumulate_grad_batches": 2}, None, "fit", False),
    "max_steps_inside_epoch": ({"max_steps": 3}, None, "fit", False),
    "max_steps_at_limited_epoch_end": ({"max_steps": 4, "limit_train_batches": 2}, None, "fit", False),
    "should_stop_inside_epoch": ({}, {"at": 3}, "fit", False),
    "should_stop_at_limited_epoch_end": ({"limit_train_batches": 2, "max_epochs": 3}, {"at": 4}, "fit", False),
    "should_stop_at_limited_epoch_end_validating": ({"limit_train_batches": 2, "limit_val_batches": 1, "max_epochs": 3},
                                                    {"at": 4}, "fit", True),
    "max_time": ({"max_time": "00:00:00:01", "max_epochs": 5}, {"at": 3, "sleep": 1.1}, "fit", False),
    "should_stop_before_min_steps": ({"min_steps": 3}, {"at": 1}, "fit", False),  # min_steps alone: one epoch too
    "fast_dev_run": ({"fast_dev_run": True}, None, "fit", True),
    "fast_dev_run_3": ({"fast_dev_run": 3}, None, "fit", True),
    "limit_val_in_fit": ({"limit_train_batches": 1, "limit_val_batches": 2}, None, "fit", True),
    "sanity_steps": ({"limit_train_batches": 1, "max_epochs": 1, "num_sanity_val_steps": 2}, None, "fit", True),
    "limit_validate": ({"limit_val_batches": 2}, None, "validate", False),
    "limit_test": ({"limit_test_batches": 3}, None, "test", False),
    "limit_predict": ({"limit_predict_batches": 2}, None, "predict", False),
}

#: Cases whose stop falls inside an epoch of a loader without len(): Lightning has read one batch ahead.
READ_AHEAD = {("stream", name) for name in ("max_steps_inside_epoch", "should_stop_inside_epoch", "max_time")}


def reads_of(framework: str, kind: str, case: str) -> tuple[Reads, torch.Tensor]:
    L = frameworks()[framework]
    options, stop, stage, validate = CASES[case]
    reads = Reads()
    Model, Stop = build(L, reads)
    dataset = KINDS[kind]

    def loader(tag: str) -> DataLoader:
        return DataLoader(dataset(reads, tag), batch_size=BATCH)

    arguments = {"max_epochs": 2, "num_sanity_val_steps": 0, **options}
    torch.manual_seed(0)
    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[Stop(**stop)] if stop else [], **arguments)
        if stage == "fit":
            trainer.fit(model, loader("train"), loader("val") if validate else None)
        elif stage == "validate":
            trainer.validate(model, loader("val"), verbose=False)
        elif stage == "test":
            trainer.test(model, loader("test"), verbose=False)
        else:
            trainer.predict(model, loader("predict"))
    return reads, torch.rand(8)  # the generator after the run: every draw of the reads is in it


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_loader_is_asked_only_for_what_the_run_uses(kind: str, case: str) -> None:
    if kind == "stream" and case == "limit_fraction":
        pytest.skip("a fraction of a loader without len() is refused by both (an int limit is the way)")
    ours, after = reads_of("ours", kind, case)
    assert ours.read == ours.used, "a batch was fetched that the run did not use"
    theirs, lightning_after = reads_of("lightning", kind, case)
    assert theirs.used == ours.used
    if (kind, case) in READ_AHEAD:
        ahead = [("train", index) for index in range(len(ours.read) % ITEMS, len(ours.read) % ITEMS + BATCH)]
        assert theirs.read == ours.read + ahead  # Lightning's look-ahead: the one documented difference
    else:
        assert theirs.read == ours.read
        assert torch.equal(after, lightning_after)


# ------------------------------------------------- weights over several limited epochs
class Augmented(Dataset):
    """Regression items with a random jitter drawn in the main process at every read."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(3)
        self.x, self.y = torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index] + 0.1 * torch.randn(4), self.y[index]


def regression_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))


def train_limited(framework: str, limit: int | float, epochs: int) -> torch.nn.Module:
    L = frameworks()[framework]

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = regression_net()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    L.seed_everything(7)
    model = Regressor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="cpu", max_epochs=epochs, limit_train_batches=limit, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model, DataLoader(Augmented(), batch_size=4, shuffle=True))
    return model.net


def train_by_hand(batches: int, epochs: int) -> torch.nn.Module:
    from trainer import seed_everything

    seed_everything(7)
    net = regression_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(Augmented(), batch_size=4, shuffle=True)
    for _ in range(epochs):
        net.train()
        for index, (x, y) in enumerate(loader):
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            if index + 1 == batches:  # stop after the last batch used, before asking for another
                break
    return net


@pytest.mark.parametrize("limit", [3, 0.3])
def test_limited_epochs_with_augmentation_train_to_lightnings_weights(limit: int | float) -> None:
    """4 epochs of 3 of 10 batches, a random jitter per item and dropout: the same draws in the
    same order as Lightning and as the hand-written loop, so the same weights."""
    ours = train_limited("ours", limit, epochs=4)
    theirs = train_limited("lightning", limit, epochs=4)
    by_hand = train_by_hand(batches=3, epochs=4)
    for (name, mine), other, hand in zip(ours.state_dict().items(), theirs.state_dict().values(), by_hand.state_dict().values()):
        assert torch.equal(mine, other), f"{name} differs from Lightning's"
        assert torch.equal(mine, hand), f"{name} differs from the hand-written loop's"
