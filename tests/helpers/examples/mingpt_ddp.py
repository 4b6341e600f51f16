"""pytorch/examples' distributed/minGPT-ddp on 2 processes: the script's own `Trainer` class
(mingpt/trainer.py) with its snapshots, and the port (tests/helpers/examples/mingpt.py's `GPT`
module) under `strategy="ddp"`. tests/helpers/scripts/distributed_examples_worker.py runs both under
torchrun; tests/examples/test_distributed_examples.py reads the results.

The script as written, on CPU in fp32 (use_amp=False): both loaders with `pin_memory=True`,
`shuffle=False` and a `DistributedSampler` (shuffling, seed 0; the test loader's is never told
an epoch), DDP, epochs counted from 1 (`set_epoch(epoch)` on the training sampler), each batch
`zero_grad(set_to_none=True)`, backward, `clip_grad_norm_(1.0)`, step; the eval pass in
training mode under `set_grad_enabled(False)` after each epoch; rank 0 saving
`{model_state, optimizer_state, finished_epoch}` every `save_every` epochs, and a process that
finds the snapshot loading both states before the DDP wrap and running the epochs after
`finished_epoch`. The script never seeds (each rank would split the dataset its own way):
here every rank seeds 0 before building the data and the model, as `make_gpt` does.

Its snapshot holds no random state: the resumed script's dropout draws start afresh, so it
does not end where the uninterrupted run does; the port's checkpoint holds the generators.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, random_split
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.examples.mingpt import BLOCK, GPT, V, CharDataset


def train_objs() -> tuple[GPT, Dataset, Dataset]:
    """`get_train_objs`: the dataset split, then the model (its init after the split's draws)."""
    text = "".join("abcdefgh"[i] for i in torch.randint(0, V, (62,), generator=torch.Generator().manual_seed(8)))
    torch.manual_seed(0)
    dataset = CharDataset(text)
    train_len = int(len(dataset) * 0.8)
    train_set, test_set = random_split(dataset, [train_len, len(dataset) - train_len])
    assert len(dataset) == 62 - BLOCK
    return GPT(), train_set, test_set


def prepare_dataloader(dataset: Dataset) -> DataLoader:
    return DataLoader(dataset, batch_size=4, pin_memory=True, shuffle=False, num_workers=0,
                      sampler=DistributedSampler(dataset))


def port_objs() -> tuple[GPT, DataLoader, DataLoader]:
    model, train_set, test_set = train_objs()
    return model, prepare_dataloader(train_set), prepare_dataloader(test_set)


class ScriptTrainer:
    """mingpt/trainer.py's `Trainer`, on CPU, fp32, with a local snapshot path."""

    def __init__(self, max_epochs: int, save_every: int, snapshot_path: str, model: GPT,
                 optimizer: torch.optim.Optimizer, train_dataset: Dataset, test_dataset: Dataset) -> None:
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.max_epochs, self.save_every, self.snapshot_path = max_epochs, save_every, snapshot_path
        self.train_loader = prepare_dataloader(train_dataset)
        self.test_loader = prepare_dataloader(test_dataset)
        self.epochs_run = 0
        self.raw_model, self.optimizer = model, optimizer
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path, map_location="cpu")
            model.load_state_dict(snapshot["model_state"])
            optimizer.load_state_dict(snapshot["optimizer_state"])
            self.epochs_run = snapshot["finished_epoch"]
        self.model = DDP(model)

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor, train: bool = True) -> float:
        with torch.set_grad_enabled(train):
            _, loss = self.model(source, targets)
        if train:
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch: int, dataloader: DataLoader, train: bool = True) -> None:
        if train:
            dataloader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        for source, targets in dataloader:
            loss = self._run_batch(source, targets, train)
            (self.raw_model.train_losses if train else self.raw_model.eval_losses).append(loss)

    def train(self) -> None:
        for epoch in range(self.epochs_run, self.max_epochs):
            epoch += 1
            self._run_epoch(epoch, self.train_loader, train=True)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                torch.save({"model_state": self.raw_model.state_dict(), "optimizer_state": self.optimizer.state_dict(),
                            "finished_epoch": epoch}, self.snapshot_path)
            self._run_epoch(epoch, self.test_loader, train=False)


def original(max_epochs: int, snapshot_path: str) -> GPT:
    model, train_set, test_set = train_objs()
    ScriptTrainer(max_epochs, 1, snapshot_path, model, model.configure_optimizers(), train_set, test_set).train()
    return model
