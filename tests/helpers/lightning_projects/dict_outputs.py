"""A training_step returning a dict with extra keys (`{"loss", "logits", "acc"}`), read by a
`Callback.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)`, with
`accumulate_grad_batches=2`, `gradient_clip_val` by value, `on_before_optimizer_step` logging
`grad_norm(self, norm_type=2)` (Lightning's docs recipe), `on_after_backward`, validation
logging with `on_step=True, on_epoch=True`, and `log_dict(..., prog_bar=True)`. With
`returns="tensor"` training_step returns the bare loss and the callback reads `outputs["loss"]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import Callback
from trainer.utilities import grad_norm


class OutputsCollector(Callback):
    def __init__(self) -> None:
        self.keys: list[list[str]] = []
        self.accs: list[float] = []
        self.losses: list[float] = []
        self.batch_idx: list[int] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.keys.append(sorted(outputs))
        if "acc" in outputs:
            self.accs.append(float(outputs["acc"]))
        self.losses.append(float(outputs["loss"]))
        self.batch_idx.append(batch_idx)


class Net(L.LightningModule):
    def __init__(self, lr: float = 0.1, hidden: int = 16, returns: str = "dict") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.body = torch.nn.Sequential(torch.nn.Linear(10, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1))
        self.head = torch.nn.Linear(hidden, 4)
        self.norms: list[float] = []
        self.after_backward = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log_dict({"train_loss": loss, "train_acc": acc}, prog_bar=True, on_step=True, on_epoch=True)
        if self.hparams.returns == "tensor":
            return loss
        return {"loss": loss, "logits": logits.detach(), "acc": acc}

    def on_after_backward(self) -> None:
        self.after_backward += 1

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        norms = grad_norm(self, norm_type=2)
        self.norms.append(float(norms["grad_2.0_norm_total"]))
        self.log_dict(norms)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_step=True, on_epoch=True)
        self.log_dict({"val_acc": (logits.argmax(-1) == y).float().mean()}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3, accumulate: int = 2,
         returns: str = "dict") -> dict[str, Any]:
    L.seed_everything(3)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(112, 10, generator=g)
    y = (x[:, :4] * torch.tensor([1.0, -1.0, 0.5, 2.0])).argmax(-1)
    collector = OutputsCollector()
    model = Net(returns=returns)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[collector], accumulate_grad_batches=accumulate, gradient_clip_val=0.02,
                        gradient_clip_algorithm="value", enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:80], y[:80]), batch_size=10, shuffle=True),  # 8 batches, 4 steps
                DataLoader(TensorDataset(x[80:], y[80:]), batch_size=8))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "keys": collector.keys,
            "accs": collector.accs, "losses": collector.losses, "batch_idx": collector.batch_idx,
            "norms": model.norms, "after_backward": model.after_backward}
