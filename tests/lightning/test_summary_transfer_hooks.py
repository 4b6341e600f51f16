"""The model summary and the TensorBoard graph move `example_input_array` through the batch
transfer hooks (the module's or the DataModule's), as Lightning does: a hook that augments at
random (`on_after_batch_transfer` while `trainer.training`, as Lightning's Kornia tutorial
writes it) draws there too, so the weights stay Lightning's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_weights

pytest.importorskip("lightning")


def augment(x: torch.Tensor) -> torch.Tensor:
    return x + 0.1 * torch.randn_like(x)  # a random augmentation: it moves the global stream


def make(pkg: Any, on: str, root: Path, graph: bool) -> tuple[Any, list[tuple[int, ...]]]:
    seen: list[tuple[int, ...]] = []

    def hook(self: Any, batch: Any, dataloader_idx: int) -> Any:
        seen.append(tuple(batch[0].shape) if isinstance(batch, (list, tuple)) else tuple(batch.shape))
        if self.trainer.training:
            return [augment(batch[0]), *batch[1:]] if isinstance(batch, (list, tuple)) else augment(batch)
        return batch

    class Net(pkg.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
            self.example_input_array = torch.zeros(3, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(pkg.LightningDataModule):
        def train_dataloader(self) -> Any:
            g = torch.Generator().manual_seed(1)
            data = TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))
            return DataLoader(data, batch_size=4)

    if on == "module":
        Net.on_after_batch_transfer = hook
    else:
        Data.on_after_batch_transfer = lambda self, batch, idx: hook(self.trainer.lightning_module, batch, idx)
    torch.manual_seed(0)
    model = Net()
    logger: Any = False
    if graph:
        logger = pkg.loggers.TensorBoardLogger(str(root), log_graph=True)
    trainer = pkg.Trainer(max_epochs=2, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                          default_root_dir=str(root))
    trainer.fit(model, datamodule=Data())
    return model, seen


@pytest.mark.parametrize("graph", [False, True], ids=["summary", "summary+graph"])
@pytest.mark.parametrize("on", ["module", "datamodule"])
def test_example_input_goes_through_the_transfer_hooks_as_in_lightning(on: str, graph: bool, tmp_path: Path) -> None:
    import lightning.pytorch as lightning

    import trainer

    ours, our_seen = make(trainer, on, tmp_path / "ours", graph)
    theirs, their_seen = make(lightning, on, tmp_path / "lightning", graph)
    assert our_seen == their_seen and our_seen[0] == (3, 4)  # the example first, then the batches
    assert_same_weights(ours, theirs)
