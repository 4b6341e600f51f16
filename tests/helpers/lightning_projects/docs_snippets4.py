"""Lightning's documentation snippets, completed into runs with this package's imports (the
second part of docs_snippets2.py's set): the DataModule page
(`setup` by stage, the four loaders, `prepare_data`/`setup` called by hand, `test`/`validate`/
`predict` with `datamodule=` only, a list of batches), the speed page (a GAN with
`toggle_model(sync_grad=...)`, `optimizer_zero_grad` with `set_to_none`, `torch.compile(model)`)
the Trainer page's reproducibility recipe (`seed_everything(42, workers=True)` with
`deterministic=True`: NumPy, `random` and torch drawn in DataLoader workers) and the
LightningModule API pages' examples (`dataloader_idx`, `configure_callbacks`, `print`,
`load_from_checkpoint` with `map_location`, `to_torchscript(file_path=...)`, `toggled_optimizer`).

Each `run_<page>(root_dir)` returns what the docs-snippets comparison test
compares with Lightning's run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import EarlyStopping, ModelCheckpoint
from trainer import LightningDataModule, LightningModule, Trainer, seed_everything

QUIET: dict[str, Any] = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False)


def data(n: int = 32, seed: int = 1, classes: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.randint(0, classes, (n,), generator=g) if classes else torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def loader(n: int = 32, seed: int = 1, classes: int = 0, shuffle: bool = False, batch_size: int = 8) -> DataLoader:
    return DataLoader(data(n, seed, classes), batch_size=batch_size, shuffle=shuffle)


class Base(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)



def _floats(results: Any) -> list[dict[str, float]]:
    results = results if isinstance(results, list) else [results]
    return [{key: float(value) for key, value in result.items()} for result in results]


# ------------------------------------------------------------------------------ datamodule page
class MNISTDataModule(LightningDataModule):
    """The page's DataModule over a small random dataset (MNIST left out): `setup` by stage,
    `random_split` with a seeded generator, the four loaders, `teardown`."""

    def __init__(self, data_dir: str = "path/to/dir", batch_size: int = 4) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.calls: list[str] = []
        self.num_classes = 3

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{stage}")
        if stage == "fit":
            full = data(24, seed=7, classes=3)
            self.mnist_train, self.mnist_val = torch.utils.data.random_split(
                full, [16, 8], generator=torch.Generator().manual_seed(42))
        if stage == "test":
            self.mnist_test = data(8, seed=8, classes=3)
        if stage == "predict":
            self.mnist_predict = data(8, seed=9, classes=3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_predict, batch_size=self.batch_size)

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown:{stage}")


class ClassificationTask(LightningModule):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.model(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", nn.functional.cross_entropy(self.model(x), y))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return self.model(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.model.parameters(), lr=0.02)


class CustomDataModule(LightningDataModule):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()


def run_datamodule(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    dm = MNISTDataModule()
    dm.prepare_data()
    dm.setup(stage="fit")
    model = ClassificationTask(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, dm.num_classes)))
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, **{**QUIET, "enable_checkpointing": True})
    trainer.fit(model, dm)
    assert trainer.datamodule is dm
    lengths = [len(trainer.train_dataloader), len(trainer.val_dataloaders)]
    dm.setup(stage="test")
    tested = trainer.test(datamodule=dm, verbose=False)
    lengths.append(len(trainer.test_dataloaders))
    validated = trainer.validate(datamodule=dm, verbose=False)
    predicted = trainer.predict(datamodule=dm)
    lengths.append(len(trainer.predict_dataloaders))
    batches = [(torch.rand(4, 4), torch.randint(0, 3, (4,))) for _ in range(5)]  # "random list of batches"
    listed = ClassificationTask(nn.Linear(4, 3))
    list_trainer = Trainer(default_root_dir=root_dir / "list", max_epochs=1, **QUIET)
    try:
        list_trainer.fit(listed, batches)
    except ValueError as error:  # Lightning combines the list as several loaders, and each tuple as one
        listed = error  # type: ignore[assignment]
    custom = CustomDataModule(lr=0.1, width=3)
    return {"model": model, "trainer": trainer, "calls": dm.calls, "lengths": lengths, "tested": _floats(tested),
            "validated": _floats(validated), "predicted": torch.cat(predicted),
            "listed": listed if isinstance(listed, ValueError) else (list_trainer.global_step, dict(listed.state_dict())),
            "custom": dict(custom.hparams)}


# ----------------------------------------------------------------------------------- speed page
class SimpleGAN(LightningModule):
    """The speed page's GAN: `toggle_model(sync_grad=...)`, steps every second batch or at the
    epoch's last one (`self.trainer.is_last_batch`)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.G = nn.Sequential(nn.Linear(2, 4))
        self.D = nn.Sequential(nn.Linear(4, 1))
        self.criterion = nn.BCEWithLogitsLoss()

    def sample_G(self, n: int) -> Tensor:
        return self.G(torch.randn(n, 2, device=self.device))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        g_opt, d_opt = self.optimizers()
        X, _ = batch
        X.requires_grad = True
        batch_size = X.shape[0]
        real_label = torch.ones((batch_size, 1), device=self.device)
        fake_label = torch.zeros((batch_size, 1), device=self.device)
        is_last_batch_to_accumulate = (batch_idx + 1) % 2 == 0 or self.trainer.is_last_batch
        g_X = self.sample_G(batch_size)
        with d_opt.toggle_model(sync_grad=is_last_batch_to_accumulate):
            d_x = self.D(X)
            errD_real = self.criterion(d_x, real_label)
            d_z = self.D(g_X.detach())
            errD_fake = self.criterion(d_z, fake_label)
            errD = errD_real + errD_fake
            self.manual_backward(errD)
            if is_last_batch_to_accumulate:
                d_opt.step()
                d_opt.zero_grad()
        with g_opt.toggle_model(sync_grad=is_last_batch_to_accumulate):
            d_z = self.D(g_X)
            errG = self.criterion(d_z, real_label)
            self.manual_backward(errG)
            if is_last_batch_to_accumulate:
                g_opt.step()
                g_opt.zero_grad()
        self.log_dict({"g_loss": errG, "d_loss": errD}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.G.parameters(), lr=0.01), torch.optim.Adam(self.D.parameters(), lr=0.01)


class SetToNone(Base):
    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=True)


def run_speed(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    gan = SimpleGAN()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, **QUIET)
    trainer.fit(gan, DataLoader(TensorDataset(torch.randn(20, 4), torch.zeros(20)), batch_size=4))
    torch.manual_seed(0)
    model = SetToNone()
    compiled = torch.compile(model, backend="eager")  # the page's torch.compile(model), without a C++ build
    other = Trainer(default_root_dir=root_dir / "z", max_epochs=2, accumulate_grad_batches=2, **QUIET)
    other.fit(compiled, loader(32))
    return {"model": gan, "trainer": trainer, "compiled": dict(model.state_dict()),
            "compiled_steps": other.global_step}


# ------------------------------------------------------------- LightningModule API docstrings
class ApiModel(LightningModule):
    """The examples of the LightningModule API pages: `validation_step` with `dataloader_idx=0`
    and names of its own per loader, `configure_callbacks`, `self.print` in `forward`."""

    def __init__(self, num_layers: int = 2, pretrained_ckpt_path: str = "none") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.l1 = nn.Linear(4, 3)
        self.print_in_forward = True

    def forward(self, x: Tensor) -> Tensor:
        if not self.training and self.print_in_forward:  # Lightning's print needs a Trainer
            self.print(tuple(x.shape), "in forward")
        return self.l1(x)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        out = self(x)
        loss = nn.functional.cross_entropy(out, y) if dataloader_idx == 0 else nn.functional.nll_loss(out.log_softmax(-1), y)
        labels_hat = torch.argmax(out, dim=1)
        acc = torch.sum(y == labels_hat).item() / (len(y) * 1.0)
        self.log_dict({f"val_loss_{dataloader_idx}": loss, f"val_acc_{dataloader_idx}": acc})
        self.log("val_acc", acc, add_dataloader_idx=False) if dataloader_idx == 0 else None

    def configure_callbacks(self) -> Any:
        early_stop = EarlyStopping(monitor="val_acc", mode="max", patience=1)
        checkpoint = ModelCheckpoint(monitor="val_loss_0/dataloader_idx_0")
        return [early_stop, checkpoint]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class Toggled(Base):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        with self.toggled_optimizer(opt):
            x, y = batch
            loss = nn.functional.mse_loss(self.layer(x), y)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()


def run_module_api(root_dir: Path) -> dict[str, Any]:
    import contextlib
    import io

    torch.manual_seed(0)
    model = ApiModel()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=6, **{**QUIET, "enable_checkpointing": True})
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.fit(model, loader(32, classes=3, shuffle=True),
                    [loader(8, seed=2, classes=3), loader(12, seed=3, classes=3, batch_size=4)])
    checkpoint = trainer.checkpoint_callback
    best = Path(checkpoint.best_model_path).name
    map_location = {"cuda:1": "cuda:0"}
    loaded = ApiModel.load_from_checkpoint(checkpoint.best_model_path, map_location=map_location, num_layers=128,
                                           pretrained_ckpt_path="new")
    loaded.eval()
    loaded.freeze()
    loaded.print_in_forward = False
    x = data(2, seed=5)[:][0]
    traced = loaded.to_torchscript(file_path=root_dir / "model_trace.pt", method="trace", example_inputs=x)
    reread = torch.jit.load(root_dir / "model_trace.pt")
    torch.manual_seed(0)
    toggled = Toggled()
    Trainer(default_root_dir=root_dir / "t", max_epochs=1, **QUIET).fit(toggled, loader(16))
    return {"model": model, "trainer": trainer, "best": best, "stopped": trainer.callbacks[0].stopped_epoch,
            "loaded": (dict(loaded.hparams), [p.requires_grad for p in loaded.parameters()], loaded.training),
            "traced": (traced(x), reread(x)), "printed": printed.getvalue().count("in forward"),
            "toggled": dict(toggled.state_dict()),
            "callbacks": [type(cb).__name__ for cb in trainer.callbacks if type(cb).__name__ in ("EarlyStopping", "ModelCheckpoint")]}


# -------------------------------------------------------------------- Trainer page: reproducibility
class Augmented(torch.utils.data.Dataset):
    """Augmentation drawn in the worker from NumPy, `random` and torch."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> Tensor:
        import random

        import numpy as np

        return torch.tensor([index, np.random.rand(), random.random(), torch.rand(1).item()], dtype=torch.float32)


class Reproducible(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.seen: list[Tensor] = []

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        self.seen.append(batch)
        return self.layer(batch).pow(2).mean()

    def predict_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        return batch

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run_reproducibility(root_dir: Path) -> dict[str, Any]:
    seed_everything(42, workers=True)
    model = Reproducible()
    trainer = Trainer(default_root_dir=root_dir, deterministic=True, max_epochs=1, **QUIET)
    trainer.fit(model, DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2))
    predicted = trainer.predict(model, DataLoader(Augmented(), batch_size=8, num_workers=2))
    return {"model": model, "trainer": trainer, "seen": torch.cat(model.seen), "predicted": torch.cat(predicted)}


# ------------------------------------------------------- Trainer page: inference_mode, fast_dev_run
class GradInValidation(LightningModule):
    """`Trainer(inference_mode=False)`: `validation_step` turns gradients on for a second layer."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = nn.Linear(4, 3)
        self.layer2 = nn.Linear(3, 1)
        self.grads: list[Tensor] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        preds = self.layer1(batch[0])
        with torch.enable_grad():
            grad_preds = preds.requires_grad_()
            preds2 = self.layer2(grad_preds)
            (gradient,) = torch.autograd.grad(preds2.sum(), grad_preds)
        self.grads.append(gradient)
        self.log("preds2", preds2.mean())

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self.layer2(self.layer1(batch[0])).pow(2).mean()

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self.layer1(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run_trainer_flags(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = GradInValidation()
    trainer = Trainer(default_root_dir=root_dir, inference_mode=False, **QUIET)
    validated = trainer.validate(model, loader(8, seed=2), verbose=False)
    dev = Trainer(default_root_dir=root_dir / "dev", fast_dev_run=7, **QUIET)
    dev.fit(model, loader(80), loader(80, seed=3))
    predictions = dev.predict(model, loader(80, seed=4))
    return {"model": model, "trainer": dev, "validated": _floats(validated), "grads": torch.cat(model.grads),
            "predicted": len(predictions), "steps": dev.global_step}
