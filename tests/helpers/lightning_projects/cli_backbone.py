"""Lightning's backbone image classifier example (examples/pytorch/basics/backbone_image_classifier.py),
small: built by `LightningCLI(LitClassifier, MyDataModule, seed_everything_default=1234,
save_config_kwargs={"overwrite": True}, run=False)`, then `fit`, `test(ckpt_path="best")` and
`predict(ckpt_path="best")`; the module takes an optional `backbone` module (built by default when
none is given) and saves its other arguments with `save_hyperparameters(ignore=["backbone"])`,
logs `train_loss` with `on_epoch=True` and `valid_loss` with `on_step=True`. The data is the
shipped demo's `MNIST` (`trainer.demos.mnist_datamodule`; the twin imports Lightning's).

As in cli_autoencoder.py: the download is replaced by a small folder in the hosted copy's
format (Lightning's demo reads it with `PL_USE_MOCKED_MNIST=1`, set here), `transforms.ToTensor()`
is dropped (the hosted-copy reader ignores `transform`); 80 training images (a 64/16 split), 16
test images, batches of 16, two epochs (the command line sets them, the root folder, the
accelerator and the progress bar).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, random_split

from trainer import LightningDataModule, LightningModule, cli_lightning_logo
from trainer.cli import LightningCLI
from trainer.demos.mnist_datamodule import MNIST

DATASETS_PATH = os.path.join(os.getcwd(), "Datasets")


class Backbone(torch.nn.Module):
    def __init__(self, hidden_dim: int = 128) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(28 * 28, hidden_dim)
        self.l2 = torch.nn.Linear(hidden_dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.size(0), -1)
        x = torch.relu(self.l1(x))
        return torch.relu(self.l2(x))


class LitClassifier(LightningModule):
    def __init__(self, backbone: Backbone | None = None, learning_rate: float = 0.0001) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        if backbone is None:
            backbone = Backbone()
        self.backbone = backbone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int | None = None) -> torch.Tensor:
        x, _ = batch
        return self(x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        dataset = MNIST(DATASETS_PATH, train=True, download=True)
        self.mnist_test = MNIST(DATASETS_PATH, train=False, download=True)
        self.mnist_train, self.mnist_val = random_split(dataset, [64, 16], generator=torch.Generator().manual_seed(42))
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)


def write_mnist(root: Path) -> None:
    folder = root / "MNIST" / "complete"
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(9)
    for name, count in (("training.pt", 80), ("test.pt", 16)):
        images = torch.randint(0, 256, (count, 28, 28), generator=generator, dtype=torch.uint8)
        torch.save((images, torch.randint(10, (count,), generator=generator)), folder / name)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    global DATASETS_PATH
    root = Path(root_dir)
    DATASETS_PATH = str(root / "Datasets")
    write_mnist(root / "Datasets")
    os.environ["PL_USE_MOCKED_MNIST"] = "1"
    cli_lightning_logo()
    cli = LightningCLI(
        LitClassifier, MyDataModule, seed_everything_default=1234, save_config_kwargs={"overwrite": True}, run=False,
        args=["--trainer.default_root_dir", str(root), "--trainer.accelerator", "cpu", "--trainer.precision", precision,
              "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false", "--data.batch_size", "16"],
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    val = dict(cli.trainer.callback_metrics)
    test = cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule, verbose=False)[0]
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    return {"model": cli.model, "trainer": cli.trainer, "val": val, "test": test, "predictions": predictions,
            "hparams": dict(cli.model.hparams)}
