"""Lightning's basic autoencoder example (examples/pytorch/basics/autoencoder.py), small: built by
`LightningCLI(LitAutoEncoder, MyDataModule, seed_everything_default=1234, run=False,
trainer_defaults={"callbacks": ImageSampler(), "max_epochs": ...}, save_config_kwargs={"overwrite":
True})`, then `fit`, `test(ckpt_path="best")` and `predict(ckpt_path="best")` on the CLI's
objects; `save_hyperparameters()`, one step helper logging `{stage}_loss` with `on_step=True`, a
`predict_step(..., dataloader_idx=None)`, and a `rank_zero_only` callback that runs the model in
eval mode on validation images at each epoch's end. The data is the shipped demo's `MNIST`
(`trainer.demos.mnist_datamodule`; the twin imports Lightning's).

The download is replaced by a small folder in the hosted copy's format written first
(synthetic uint8 images; Lightning's demo reads it with `PL_USE_MOCKED_MNIST=1`, set here, as it
has no torchvision to use), so `transforms.ToTensor()` is dropped (the demo's hosted-copy reader
ignores `transform`), and the callback keeps its generated images in memory instead of saving
torchvision grids as PNG files. 80 training images (a 64/16 split), 16 test images, batches of
16, two epochs; the command line sets the root folder, the accelerator and the progress bar.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, random_split

from trainer import LightningDataModule, LightningModule, Trainer, callbacks, cli_lightning_logo
from trainer.cli import LightningCLI
from trainer.demos.mnist_datamodule import MNIST
from trainer.utilities import rank_zero_only

DATASETS_PATH = os.path.join(os.getcwd(), "Datasets")


class ImageSampler(callbacks.Callback):
    def __init__(self, num_samples: int = 3) -> None:
        super().__init__()
        self.num_samples = num_samples
        self.generated: list[torch.Tensor] = []

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        images, _ = next(iter(DataLoader(trainer.datamodule.mnist_val, batch_size=self.num_samples)))
        images_flattened = images.view(images.size(0), -1)
        with torch.no_grad():
            pl_module.eval()
            images_generated = pl_module(images_flattened.to(pl_module.device))
            pl_module.train()
        self.generated.append(images_generated.reshape(images.shape))


class LitAutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 64, learning_rate: float = 10e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 28 * 28))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._common_step(batch, batch_idx, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._common_step(batch, batch_idx, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._common_step(batch, batch_idx, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int | None = None) -> torch.Tensor:
        return self(self._prepare_batch(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def _prepare_batch(self, batch: Any) -> torch.Tensor:
        x, _ = batch
        return x.view(x.size(0), -1)

    def _common_step(self, batch: Any, batch_idx: int, stage: str) -> torch.Tensor:
        x = self._prepare_batch(batch)
        loss = F.mse_loss(x, self(x))
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss


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
    sampler = ImageSampler()
    cli = LightningCLI(
        LitAutoEncoder,
        MyDataModule,
        seed_everything_default=1234,
        run=False,
        trainer_defaults={"callbacks": sampler, "max_epochs": 2},
        save_config_kwargs={"overwrite": True},
        args=["--trainer.default_root_dir", str(root), "--trainer.accelerator", "cpu", "--trainer.precision", precision,
              "--trainer.enable_progress_bar", "false", "--data.batch_size", "16"],
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    val = dict(cli.trainer.callback_metrics)
    test = cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule, verbose=False)[0]
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    return {"model": cli.model, "trainer": cli.trainer, "val": val, "test": test, "predictions": predictions,
            "generated": sampler.generated}
