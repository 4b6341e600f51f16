"""Training from several sources with Lightning's `CombinedLoader`: a labelled set and a shorter
unlabelled one (shuffled, so a loader started again draws a new order), a model with dropout
(every step draws from the random streams), in the mode given (`min_size`, `max_size_cycle`,
`max_size`), or as a plain dict of loaders (`mode=None`: Lightning combines it with
`max_size_cycle`). Every step records which samples it saw, so the batch structure and the
order of each source can be compared with Lightning's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from trainer.utilities.combined_loader import CombinedLoader


class SemiSupervised(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
        self.seen: list[Any] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        labelled, unlabelled = batch["labelled"], batch["unlabelled"]
        x, y, index = labelled
        loss = F.mse_loss(self(x), y)
        self.seen.append((batch_idx, index.tolist(), None if unlabelled is None else unlabelled[1].tolist()))
        if unlabelled is not None:  # max_size: None once the unlabelled set ran out
            u = unlabelled[0]
            loss = loss + 0.1 * (self(u) - self(u + 0.01 * torch.randn_like(u))).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def loaders() -> dict[str, DataLoader]:
    g = torch.Generator().manual_seed(11)
    x, u = torch.randn(40, 4, generator=g), torch.randn(18, 4, generator=g)
    labelled = TensorDataset(x, x.sum(-1, keepdim=True).sin(), torch.arange(40))
    unlabelled = TensorDataset(u, torch.arange(18))
    return {"labelled": DataLoader(labelled, batch_size=6, shuffle=True),
            "unlabelled": DataLoader(unlabelled, batch_size=4, shuffle=True)}


def main(root_dir: str | Path, precision: str = "32-true", mode: str | None = "max_size_cycle", max_epochs: int = 2,
         ckpt_path: str | None = None, **trainer_options: Any) -> dict[str, Any]:
    L.seed_everything(5)
    model = SemiSupervised()
    combined = loaders() if mode is None else CombinedLoader(loaders(), mode)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        **trainer_options)
    trainer.fit(model, combined, ckpt_path=ckpt_path)
    return {"model": model, "trainer": trainer, "seen": model.seen, "batches": trainer.num_training_batches,
            "train_dataloader": type(trainer.train_dataloader).__name__, "val": dict(trainer.callback_metrics)}
