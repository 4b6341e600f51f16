"""Every argument Lightning's public methods take is taken here too (by name), so a call written
for Lightning never stops at a `TypeError`; the few left out are listed, each with the reason.
Then the behaviours behind the arguments added for this: `save_hyperparameters(dict)`,
`save_checkpoint(filepath=)`, `optimizers(use_pl_optimizer=False)`, the eval batch hooks'
`dataloader_idx`, `on_validation_model_zero_grad`."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import callbacks
import trainer as L
from trainer.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger

pl = pytest.importorskip("lightning.pytorch")

#: Lightning arguments deliberately not taken (docs/lightning.md says why for each).
NOT_TAKEN = {
    "ModelCheckpoint": {"save_on_exception", "train_time_interval"},
}


def _missing(theirs: Any, ours: Any) -> set[str]:
    mine = inspect.signature(ours).parameters
    if any(p.kind is p.VAR_KEYWORD for p in mine.values()):
        return set()
    return {name for name, p in inspect.signature(theirs).parameters.items()
            if name not in mine and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            and name not in ("pl_module", "state_dict")}  # positional in every Lightning call


def _pairs() -> list[tuple[str, Any, Any]]:
    pairs = [(f"Trainer.{m}", getattr(pl.Trainer, m), getattr(L.Trainer, m))
             for m in ("__init__", "fit", "validate", "test", "predict", "save_checkpoint")]
    for base, ours in ((pl.LightningModule, L.LightningModule), (pl.Callback, L.Callback),
                       (pl.LightningDataModule, L.LightningDataModule)):
        for name in dir(base):
            if not name.startswith("_") and callable(getattr(base, name)) and hasattr(ours, name) \
                    and not isinstance(getattr(base, name), type):
                pairs.append((f"{base.__name__}.{name}", getattr(base, name), getattr(ours, name)))
    for name in dir(pl.callbacks):
        if hasattr(callbacks, name) and inspect.isclass(getattr(pl.callbacks, name)):
            pairs.append((name, getattr(pl.callbacks, name).__init__, getattr(callbacks, name).__init__))
    for theirs, ours in ((pl.loggers.TensorBoardLogger, TensorBoardLogger), (pl.loggers.CSVLogger, CSVLogger),
                         (pl.loggers.WandbLogger, WandbLogger), (pl.loggers.MLFlowLogger, MLFlowLogger)):
        pairs.append((theirs.__name__, theirs.__init__, ours.__init__))
    return pairs


def test_every_lightning_argument_is_taken() -> None:
    gaps = {name: _missing(theirs, ours) - NOT_TAKEN.get(name, set()) for name, theirs, ours in _pairs()}
    assert len(gaps) > 100 and not {name: gap for name, gap in gaps.items() if gap}


class _Net(L.LightningModule):
    def __init__(self, hparams: Any) -> None:
        super().__init__()
        self.save_hyperparameters(hparams)
        self.layer = torch.nn.Linear(2, self.hparams.width)
        self.seen: list[tuple[str, int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).sum()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", self.layer(batch[0]).sum())

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        super().on_validation_batch_end(outputs, batch, batch_idx, dataloader_idx)  # Lightning's call
        self.seen.append(("batch_end", dataloader_idx))

    def on_validation_model_zero_grad(self) -> None:
        super().on_validation_model_zero_grad()
        self.seen.append(("zero_grad", int(all(p.grad is None for p in self.parameters()))))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_lightning_forms_of_hyperparameters_checkpoints_and_hooks(tmp_path: Path) -> None:
    """`__init__(self, hparams)` with `save_hyperparameters(hparams)` (a Namespace): the items
    become `self.hparams`, and `load_from_checkpoint` builds the module again from them;
    `save_checkpoint(filepath=)`; the eval batch hooks take `dataloader_idx`; fit's validations
    start with `on_validation_model_zero_grad`."""
    torch.manual_seed(0)
    model = _Net(argparse.Namespace(lr=0.1, width=3))
    assert dict(model.hparams) == {"lr": 0.1, "width": 3} and model.hparams.lr == 0.1
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = L.Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                        num_sanity_val_steps=0)
    trainer.fit(model, data, data)
    assert model.seen == [("zero_grad", 1), ("batch_end", 0), ("batch_end", 0)]
    path = trainer.save_checkpoint(filepath=tmp_path / "net.ckpt")
    again = _Net.load_from_checkpoint(path)
    assert dict(again.hparams) == {"lr": 0.1, "width": 3} and torch.equal(again.layer.weight, model.layer.weight)
    with pytest.raises(ValueError, match="one path"):
        trainer.save_checkpoint()
    assert L.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY == pl.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY


def test_raw_optimizers_in_manual_optimization(tmp_path: Path) -> None:
    """`self.optimizers(use_pl_optimizer=False)`: the torch optimizer itself, as Lightning's."""
    found: list[Any] = []

    class Manual(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            found.append(self.optimizers(use_pl_optimizer=False))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    L.Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
              enable_checkpointing=False).fit(Manual(), DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=2))
    assert type(found[0]) is torch.optim.SGD
