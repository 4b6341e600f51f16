"""A family of classifiers sharing one base class, as research repositories write them.

`ClassifierBase` owns the optimizer, the warm-up schedule and the shared steps, and calls
`save_hyperparameters()`; `MLPClassifier` adds its architecture arguments, passes the
optimizer's up with `super().__init__(lr=lr, weight_decay=weight_decay, **kwargs)` and calls
`save_hyperparameters(ignore=...)` again; `ResidualMLP` only adds one argument and relies on
its parents to record it. The best checkpoint is rebuilt with `load_from_checkpoint` and
tested; a hyperparameter the base saved can be dropped by the child's `ignore=`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import ModelCheckpoint


class ClassifierBase(L.LightningModule):
    def __init__(self, lr: float = 1e-3, weight_decay: float = 0.0, warmup_epochs: int = 1, num_classes: int = 3,
                 log_name: str = "base") -> None:
        super().__init__()
        self.save_hyperparameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _shared(self, batch: Any, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log(f"{stage}_loss", loss, prog_bar=stage == "val")
        self.log(f"{stage}_acc", (logits.argmax(-1) == y).float().mean())
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._shared(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, "test")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        warmup = self.hparams.warmup_epochs
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: min(1.0, (epoch + 1) / (warmup + 1)))
        return {"optimizer": optimizer, "lr_scheduler": schedule}


class MLPClassifier(ClassifierBase):
    def __init__(self, in_features: int = 10, hidden: int = 32, depth: int = 2, lr: float = 3e-3,
                 weight_decay: float = 1e-4, verbose: bool = False, **kwargs: Any) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, **kwargs)
        self.save_hyperparameters(ignore=["verbose", "log_name"])
        layers: list[torch.nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers += [torch.nn.Linear(width, hidden), torch.nn.GELU()]
            width = hidden
        self.body = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(width, self.hparams.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class ResidualMLP(MLPClassifier):
    def __init__(self, scale: float = 0.5, depth: int = 3, **kwargs: Any) -> None:
        super().__init__(depth=depth, **kwargs)
        self.skip = torch.nn.Linear(self.hparams.in_features, self.hparams.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x) + self.hparams.scale * self.skip(x))


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(5)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(160, 10, generator=g)
    y = torch.bucketize(x[:, 1] - x[:, 7], torch.tensor([-0.4, 0.4]))
    model = ResidualMLP(scale=0.25, hidden=24, lr=5e-3, warmup_epochs=2, verbose=True, log_name="run")
    checkpoint = ModelCheckpoint(dirpath=root_dir / "checkpoints", monitor="val_acc", mode="max", save_top_k=2,
                                 filename="mlp-{epoch:02d}-{val_acc:.3f}")
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[checkpoint], enable_progress_bar=False, enable_model_summary=False)
    train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[96:128], y[96:128]), batch_size=16)
    trainer.fit(model, train, val)
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items()}
    best = ResidualMLP.load_from_checkpoint(checkpoint.best_model_path)
    test = DataLoader(TensorDataset(x[128:], y[128:]), batch_size=16)
    tested = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).test(best, test, verbose=False)
    saved = torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=False)["hyper_parameters"]
    return {"model": model, "trainer": trainer, "val": fitted, "test": {k: float(v) for k, v in tested[0].items()},
            "hparams": dict(model.hparams), "hparams_initial": dict(model.hparams_initial), "saved_hparams": dict(saved),
            "best_model": best, "best_hparams": dict(best.hparams), "best": Path(checkpoint.best_model_path).name,
            "files": sorted(p.name for p in (root_dir / "checkpoints").iterdir())}
