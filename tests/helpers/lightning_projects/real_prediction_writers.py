"""Prediction writers from two public projects, on a small classifier's `trainer.predict`:

- `CustomPredictionsWriter(BasePredictionWriter)` (a research repository, found by code search,
  file id 35317056228; Lightning's documented example): `write_interval="epoch"`,
  `write_on_epoch_end(trainer, pl_module, predictions, batch_indices)` saving both with
  `torch.save` per rank;
- `WritePredictionFromLogits(BasePredictionWriter)` (a nnU-Net port to Lightning, file id
  22479936512): `write_on_batch_end(self, trainer, pl_module, data_dict, batch_indices, *args)`
  reading `logits`, `properties` and `case_id` from a dict `predict_step` returns.

Kept as written: the writers' signatures and bodies (the nnU-Net one's
`save_prediction_from_logits` writes the argmax and, with `save_softmax`, the softmax with
`torch.save` here instead of NIfTI files). Substituted: the model (a small MLP classifier)
and synthetic "cases"; the predict loader has a sampler that yields indices, so
`batch_indices` are known in both.
"""

from __future__ import annotations

import os
from os.path import join
from pathlib import Path
from typing import Any, Optional

import torch
from torch.utils.data import DataLoader, Dataset

import trainer as pl
from callbacks import BasePredictionWriter


def save_prediction_from_logits(logits, path, properties, save_softmax=False):
    torch.save({"seg": logits.argmax(0), "properties": properties}, path + ".pt")
    if save_softmax:
        torch.save(torch.softmax(logits, 0), path + "_softmax.pt")


class CustomPredictionsWriter(BasePredictionWriter):

    def __init__(self, output_dir: str, write_interval: Optional[str] = "epoch"):
        super().__init__(write_interval)
        self.output_dir = output_dir

    def write_on_batch_end(self, trainer, pl_module, predictions, batch_indices):
        torch.save(predictions, os.path.join(self.output_dir, f"predictions_{trainer.global_rank}.pt"))
        torch.save(batch_indices, os.path.join(self.output_dir, f"batch_indices_{trainer.global_rank}.pt"))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        torch.save(predictions, os.path.join(self.output_dir, f"predictions_{trainer.global_rank}.pt"))
        torch.save(batch_indices, os.path.join(self.output_dir, f"batch_indices_{trainer.global_rank}.pt"))


class WritePredictionFromLogits(BasePredictionWriter):
    def __init__(self, output_dir, save_softmax, write_interval):
        super().__init__(write_interval)
        self.output_dir = output_dir
        self.save_softmax = save_softmax

    def write_on_batch_end(self, trainer, pl_module, data_dict, batch_indices, *args):
        logits, properties, case_id = (data_dict["logits"], data_dict["properties"], data_dict["case_id"])
        save_prediction_from_logits(logits, join(self.output_dir, case_id), properties=properties,
                                    save_softmax=self.save_softmax)


class Cases(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        if self.trainer.predict_dataloaders is not None and getattr(self, "per_case", False):
            return {"logits": self.net(x)[0], "properties": {"batch": batch_idx}, "case_id": f"case_{batch_idx:03d}"}
        return self.net(x).softmax(-1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    pl.seed_everything(4)
    root = Path(root_dir)
    (root / "epoch").mkdir(parents=True, exist_ok=True)
    (root / "cases").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(60, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    model = Classifier()
    trainer = pl.Trainer(max_epochs=2, precision=precision, accelerator="cpu", default_root_dir=root, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[CustomPredictionsWriter(str(root / "epoch"), "epoch")])
    trainer.fit(model, DataLoader(Cases(x[:48], y[:48]), batch_size=8, shuffle=True))
    returned = trainer.predict(model, DataLoader(Cases(x[48:], y[48:]), batch_size=5))
    model.per_case = True
    cases = pl.Trainer(precision=precision, accelerator="cpu", logger=False, enable_progress_bar=False,
                       enable_model_summary=False, default_root_dir=root,
                       callbacks=[WritePredictionFromLogits(str(root / "cases"), True, "batch")])
    none_returned = cases.predict(model, DataLoader(Cases(x[48:], y[48:]), batch_size=1), return_predictions=False)
    saved = {p.name: torch.load(p, weights_only=False) for p in sorted((root / "epoch").iterdir())}
    case_files = {p.name: torch.load(p, weights_only=False) for p in sorted((root / "cases").iterdir())}
    return {"model": model, "trainer": trainer, "returned": returned, "saved": saved, "cases": case_files,
            "none_returned": none_returned}
