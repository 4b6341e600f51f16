"""pytorch/examples' distributed/ddp-tutorial-series (multigpu_torchrun.py, multinode.py) at toy
size: the script's hand-written DDP `Trainer` class with its snapshots, and a port to a `Module`.
tests/helpers/scripts/distributed_examples_worker.py runs both under torchrun; tests/examples/
test_distributed_examples.py reads the results.

The script as written, on CPU: `MyTrainDataset` (pairs of `torch.rand(20)`, `torch.rand(1)`), a
`Linear(20, 1)`, SGD(lr=1e-3), a DataLoader with `pin_memory=True`, `shuffle=False` and a
`DistributedSampler(dataset)` (shuffling with seed 0), `sampler.set_epoch(epoch)` each epoch
after a `next(iter(loader))` that reads the batch size for a print, DDP (Gloo, no device_ids),
and rank 0 saving a snapshot `{"MODEL_STATE", "EPOCHS_RUN": epoch}` after epochs where
`epoch % save_every == 0`; a process that finds the snapshot at start loads it (before the DDP
wrap) and runs `range(EPOCHS_RUN, total_epochs)`. multinode.py differs only in naming its global
rank. The script never seeds: here `torch.manual_seed(0)` before `load_train_objs` on every rank,
so both ranks hold the same dataset (as they would read the same files); sizes shrunk (64
samples, batch 4: 8 batches per rank and epoch).

Its loss, `F.cross_entropy` of a (batch, 1) output against (batch, 1) float targets, is a
softmax over a single class: every gradient is exactly zero and the weights never move. The
comparison is also made with `F.mse_loss` (`loss="mse"`), which trains.

The port: the model and loss in a `Module`, the script's loader passed to `fit` as it is (the
Trainer keeps a DistributedSampler it is given and calls its `set_epoch`), built after the
`Trainer`, which makes the process group that `DistributedSampler(dataset)` reads (the script
calls `init_process_group` itself first; the port does not),
`ModelCheckpoint(every_n_epochs=save_every)` for the snapshot and `fit(..., ckpt_path="last")`,
which resumes when the run has a checkpoint and starts afresh when it has none (the script's
`os.path.exists(snapshot_path)`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from trainer import Module

LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"cross_entropy": F.cross_entropy,
                                                                           "mse": F.mse_loss}
SIZE, BATCH = 64, 4


class MyTrainDataset(Dataset):
    def __init__(self, size: int) -> None:
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Any:
        return self.data[index]


class ScriptTrainer:
    """The script's `Trainer` (multigpu_torchrun.py), on CPU: `DDP(model)`, `map_location="cpu"`,
    and the loss passed in."""

    def __init__(self, model: torch.nn.Module, train_data: DataLoader, optimizer: torch.optim.Optimizer,
                 save_every: int, snapshot_path: str, loss: str) -> None:
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model: Any = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        self.loss_fn = LOSSES[loss]
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path: str) -> None:
        snapshot = torch.load(snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = self.loss_fn(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch: int) -> None:
        b_sz = len(next(iter(self.train_data))[0])  # for the script's print
        assert b_sz == BATCH
        self.train_data.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch: int) -> None:
        torch.save({"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}, self.snapshot_path)

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs() -> tuple[Dataset, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)  # the script never seeds; both ranks hold the same data here
    train_set = MyTrainDataset(SIZE)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, pin_memory=True, shuffle=False,
                      sampler=DistributedSampler(dataset))


def original(total_epochs: int, save_every: int, snapshot_path: str, loss: str,
             epochs: list[int] | None = None) -> dict[str, torch.Tensor]:
    """The script's `main` (the process group is the caller's); `epochs`: run these epochs in
    this order instead of `train` (what the script's resume amounts to)."""
    dataset, model, optimizer = load_train_objs()
    trainer = ScriptTrainer(model, prepare_dataloader(dataset, BATCH), optimizer, save_every, snapshot_path, loss)
    if epochs is None:
        trainer.train(total_epochs)
    else:
        for epoch in epochs:
            trainer._run_epoch(epoch)
    return {k: v.clone() for k, v in model.state_dict().items()}


class TutorialModule(Module):
    def __init__(self, model: torch.nn.Module, loss: str) -> None:
        super().__init__()
        self.model, self.loss_name = model, loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        source, targets = batch
        return LOSSES[self.loss_name](self.model(source), targets)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def port_objs(loss: str) -> tuple[TutorialModule, DataLoader]:
    """`load_train_objs` and `prepare_dataloader` for the port: the same dataset, the same
    Linear (its initial weights drawn in the same place), inside the Module."""
    dataset, model, _ = load_train_objs()
    return TutorialModule(model, loss), prepare_dataloader(dataset, BATCH)


class ToyModel(Module):
    """distributed/ddp/example.py's model: one SGD step of MSE on data each rank draws itself,
    after building the model unseeded (so each rank starts elsewhere until DDP broadcasts rank
    0's weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.net1, self.relu, self.net2 = torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        return torch.nn.MSELoss()(self(inputs), labels)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.001)


def toy_objs(rank: int) -> tuple[ToyModel, tuple[torch.Tensor, torch.Tensor]]:
    """The model and this rank's batch, drawn in the script's order (each rank seeded with its
    rank, standing in for the script's unseeded start)."""
    torch.manual_seed(rank)
    model = ToyModel()
    return model, (torch.randn(20, 10), torch.randn(20, 5))


def demo_basic(rank: int) -> dict[str, torch.Tensor]:
    """The script's `demo_basic` on CPU."""
    model, (inputs, labels) = toy_objs(rank)
    ddp_model = DDP(model)
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(inputs)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    return {k: v.clone() for k, v in model.state_dict().items()}
