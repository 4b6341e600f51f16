"""More of Lightning's documentation snippets (docs/source-pytorch), completed into runs with this
package's imports: the Trainer page (`should_stop` with `min_epochs`/`min_steps`, the properties
read inside a run, `enable_autolog_hparams`, `gradient_clip_algorithm=None`), the LightningModule
page (a task wrapping any model with `log_dict`, `save_checkpoint` + `load_from_checkpoint`,
`save_hyperparameters` with names and `ignore`, outputs kept for `on_train_epoch_end`,
`predict_step(self, batch)`), the data pages (a plain list as the training iterable, a dict of
lists of loaders), the training-tricks page (a `WeightAveraging` subclass with `should_update`,
`Tuner.lr_find`, reached as `L.pytorch.tuner.Tuner`) and transfer learning (a `BaseFinetuning`
subclass, `BackboneFinetuning`). docs_snippets3.py and docs_snippets4.py hold the other pages.

Each `run_<page>(root_dir, ...)` returns what the docs-snippets comparison test
compares with Lightning's run: `model`, `trainer`, and the snippet's own observations. What the
snippets leave as `...` is filled in with the smallest thing that works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torchmetrics
from torch import Tensor, nn
from torch.optim.swa_utils import get_ema_avg_fn
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import BackboneFinetuning, WeightAveraging
from callbacks.finetuning import BaseFinetuning
from trainer import LightningDataModule, LightningModule, Trainer
from trainer.loggers.logger import Logger
from trainer.utilities import rank_zero_only

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


# ------------------------------------------------------------------------------ Trainer page
class StopModel(Base):
    """The page's four `should_stop` snippets: at once, at epoch 2, at step 2, at step 7."""

    def __init__(self, when: str) -> None:
        super().__init__()
        self.when = when

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.when == "any" or (self.when == "epoch" and self.current_epoch == 2) or \
                (self.when == "step" and self.global_step == 2) or (self.when == "both" and self.global_step == 7):
            self.trainer.should_stop = True
        return super().training_step(batch, batch_idx)


def run_should_stop(root_dir: Path, when: str) -> dict[str, Any]:
    limits = {"any": {}, "epoch": dict(min_epochs=5, max_epochs=100), "step": dict(min_steps=5, max_epochs=100),
              "both": dict(min_steps=5, min_epochs=5, max_epochs=100)}[when]
    torch.manual_seed(0)
    model = StopModel(when)
    trainer = Trainer(default_root_dir=root_dir, **QUIET, **limits)
    trainer.fit(model, loader(16))
    return {"model": model, "trainer": trainer}


class Recorder(Logger):
    """A logger of the logging page's shape that keeps its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []

    @property
    def name(self) -> str:
        return "MyLogger"

    @property
    def version(self) -> str:
        return "0.1"

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("log_hyperparams", dict(params), *args))

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append(("log_metrics", sorted(metrics)))


class PropertiesModel(Base):
    """The Trainer page's properties, read where its snippets read them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("a_val", 2.0)
        state = self.trainer.state
        self.seen.append(("train", str(state.fn), str(state.status), str(state.stage), self.trainer.is_global_zero))
        for logger in self.trainer.loggers:
            logger.log_metrics({"foo": 1.0})
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        value = nn.functional.mse_loss(self.layer(x), y)
        state = self.trainer.state
        self.seen.append(("val", str(state.fn), str(state.stage), self.trainer.sanity_checking))
        if not self.trainer.sanity_checking:
            self.log("value", value)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        stepping_batches = self.trainer.estimated_stepping_batches
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-1, total_steps=stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def run_properties(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model, logger = PropertiesModel(), Recorder()
    options = {**QUIET, "logger": logger}
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, accumulate_grad_batches=2, **options)
    trainer.fit(model, loader(32), loader(16, seed=2, batch_size=4))
    assert trainer.callback_metrics["a_val"] == 2.0
    numbers = {"num_training_batches": trainer.num_training_batches, "num_val_batches": trainer.num_val_batches,
               "num_sanity_val_batches": trainer.num_sanity_val_batches,
               "estimated_stepping_batches": trainer.estimated_stepping_batches}
    final = (str(trainer.state.fn), str(trainer.state.status), str(trainer.state.stage))
    return {"model": model, "trainer": trainer, "seen": model.seen, "numbers": numbers, "final": final,
            "foo": sum(1 for call in logger.calls if call == ("log_metrics", ["foo"])),
            "lr": model.lr_schedulers().get_last_lr()}


class HparamsModel(Base):
    """The logging page's hyperparameters with metrics of one's own, logged in `on_train_start`."""

    def __init__(self, learning_rate: float = 0.1, another_parameter: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()

    def on_train_start(self) -> None:
        self.logger.log_hyperparams(self.hparams, {"hp/metric_1": 0, "hp/metric_2": 0})

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("hp/metric_1", nn.functional.mse_loss(self.layer(x), y))
        self.log("hp/metric_2", nn.functional.l1_loss(self.layer(x), y))


def run_autolog(root_dir: Path, autolog: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    model, logger = HparamsModel(), Recorder()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=1, **{**QUIET, "logger": logger},
                      enable_autolog_hparams=autolog)
    trainer.fit(model, loader(16), loader(8, seed=2))
    trainer.validate(model, loader(8, seed=2), verbose=False)
    calls = [call for call in logger.calls if call[0] == "log_hyperparams"]
    return {"model": model, "trainer": trainer, "calls": calls}


def run_clip_algorithm_none(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Base()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=1, gradient_clip_val=0.05, gradient_clip_algorithm=None,
                      **QUIET)
    trainer.fit(model, loader(16))
    return {"model": model, "trainer": trainer}


# ----------------------------------------------------------------------- LightningModule page
class ClassificationTask(LightningModule):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.training_step_outputs: list[Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        y_hat = self.model(x)
        self.training_step_outputs.append(y_hat.argmax(-1))
        loss = nn.functional.cross_entropy(y_hat, y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        return loss

    def on_train_epoch_end(self) -> None:
        all_preds = torch.stack(self.training_step_outputs)
        self.log("train_preds_mean", all_preds.float().mean())
        self.training_step_outputs.clear()  # free memory

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, acc = self._shared_eval_step(batch, batch_idx)
        metrics = {"val_acc": acc, "val_loss": loss}
        self.log_dict(metrics)
        return metrics

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        loss, acc = self._shared_eval_step(batch, batch_idx)
        metrics = {"test_acc": acc, "test_loss": loss}
        self.log_dict(metrics)
        return metrics

    def _shared_eval_step(self, batch: Any, batch_idx: int) -> tuple[Tensor, Tensor]:
        x, y = batch
        y_hat = self.model(x)
        loss = nn.functional.cross_entropy(y_hat, y)
        acc = torchmetrics.functional.accuracy(y_hat, y, task="multiclass", num_classes=3)
        return loss, acc

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        x, y = batch
        return self.model(x)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.model.parameters(), lr=0.02)


class LitMNIST(LightningModule):
    def __init__(self, loss_fx: Any, generator_network: nn.Module, layer_1_dim: int = 128) -> None:
        super().__init__()
        self.layer_1_dim = layer_1_dim
        self.loss_fx = loss_fx
        self.save_hyperparameters("layer_1_dim")
        self.save_hyperparameters(ignore=["loss_fx", "generator_network"])
        self.layer = nn.Linear(4, layer_1_dim)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return self.loss_fx(self.layer(x).mean(-1, keepdim=True), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Forwarding(LightningModule):
    """`predict_step(self, batch)`, without `batch_idx`, as the page writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def predict_step(self, batch: Any) -> Any:
        inputs, target = batch
        return self.layer(inputs)


class PredictData(LightningDataModule):
    def predict_dataloader(self) -> DataLoader:
        return loader(8, seed=5, classes=3)


def run_module_page(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    task = ClassificationTask(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, **QUIET)
    trainer.fit(task, loader(32, classes=3), loader(16, seed=2, classes=3))
    path = root_dir / "best_model.ckpt"
    trainer.save_checkpoint(path)
    validated = trainer.validate(task, loader(16, seed=2, classes=3), verbose=False)
    tested = trainer.test(task, loader(16, seed=3, classes=3), verbose=False)
    predictions = trainer.predict(task, loader(8, seed=4, classes=3))
    loaded = ClassificationTask.load_from_checkpoint(path, model=nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    x = data(4, seed=4)[:][0]
    loaded.eval()
    with torch.no_grad():
        y_hat = loaded.model(x)
    mnist = LitMNIST(nn.MSELoss(), nn.Linear(1, 1), layer_1_dim=6)
    mnist_trainer = Trainer(default_root_dir=root_dir / "mnist", max_steps=1, **QUIET)
    mnist_trainer.fit(mnist, loader(8))
    mnist_path = root_dir / "mnist.ckpt"
    mnist_trainer.save_checkpoint(mnist_path)
    reloaded = LitMNIST.load_from_checkpoint(mnist_path, loss_fx=nn.L1Loss(), generator_network=nn.Linear(1, 1))
    forwarding = Forwarding()
    forwarded = Trainer(default_root_dir=root_dir / "f", **QUIET).predict(forwarding, PredictData())
    return {"model": task, "trainer": trainer, "validated": _floats(validated), "tested": _floats(tested),
            "predictions": torch.cat(predictions), "y_hat": y_hat, "hparams": dict(mnist.hparams),
            "reloaded": (dict(reloaded.hparams), type(reloaded.loss_fx).__name__, reloaded.layer.out_features),
            "forwarded": torch.cat(forwarded)}


def _floats(results: Any) -> list[dict[str, float]]:
    results = results if isinstance(results, list) else [results]
    return [{key: float(value) for key, value in result.items()} for result in results]


# --------------------------------------------------------------------------------- data pages
class IterableModel(Base):
    """A module whose `train_dataloader()` returns what the iterables page lists."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.layer = nn.Linear(1, 1)
        self.batches: list[Any] = []

    def train_dataloader(self) -> Any:
        if self.source == "list":
            return list(range(6))

        def dl(n: int, seed: int) -> DataLoader:
            g = torch.Generator().manual_seed(seed)
            return DataLoader(TensorDataset(torch.randn(n, 1, generator=g)), batch_size=2)

        return {"a": [dl(4, 1), dl(6, 2)], "b": [dl(4, 3), dl(4, 4)]}

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.batches.append(batch)
        if self.source == "list":
            x = torch.tensor([[float(batch)]])
        else:
            x = torch.cat([one[0] for group in (batch["a"], batch["b"]) for one in group])
        return self.layer(x).pow(2).mean()


def run_iterables(root_dir: Path, source: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = IterableModel(source)
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, **QUIET)
    trainer.fit(model)
    return {"model": model, "trainer": trainer, "batches": model.batches}


# ------------------------------------------------------------------------ training tricks page
class EMAWeightAveraging(WeightAveraging):
    def __init__(self) -> None:
        super().__init__(avg_fn=get_ema_avg_fn())

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return (step_idx is not None) and (step_idx >= 3)


class LitModel(Base):
    def __init__(self, learning_rate: float = 0.1) -> None:
        super().__init__()
        self.learning_rate = learning_rate
        self.my_value = learning_rate

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


def run_training_tricks(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Base()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, callbacks=EMAWeightAveraging(), **QUIET)
    trainer.fit(model, loader(32, shuffle=True))
    torch.manual_seed(0)
    finder_model = LitModel()
    finder_trainer = Trainer(default_root_dir=root_dir / "lr", **QUIET)
    tuner = L.pytorch.tuner.Tuner(finder_trainer)
    lr_finder = tuner.lr_find(finder_model, loader(64, batch_size=2), num_training=20)
    new_lr = lr_finder.suggestion()
    other = LitModel()
    other_finder = L.pytorch.tuner.Tuner(Trainer(default_root_dir=root_dir / "lr2", **QUIET)).lr_find(
        other, loader(64, batch_size=2), num_training=20, attr_name="my_value")
    return {"model": model, "trainer": trainer, "lr": lr_finder.results["lr"], "loss": lr_finder.results["loss"],
            "suggestion": new_lr, "learning_rate": finder_model.learning_rate,
            "my_value": (other.my_value, other.learning_rate, other_finder.suggestion())}


# ----------------------------------------------------------------------- transfer learning page
class CustomFinetuning(BaseFinetuning):
    def __init__(self, unfreeze_at_epoch: int = 5, layers_per_epoch: int = 2) -> None:
        super().__init__()
        self.unfreeze_at_epoch = unfreeze_at_epoch
        self.layers_per_epoch = layers_per_epoch

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Any) -> None:
        if epoch >= self.unfreeze_at_epoch:
            layers_to_unfreeze = min(self.layers_per_epoch, len(list(pl_module.backbone.children())))
            backbone_children = list(pl_module.backbone.children())
            for layer in backbone_children[-layers_to_unfreeze:]:
                self.unfreeze_and_add_param_group(layer, optimizer, lr=1e-4)


class Classifier(LightningModule):
    def __init__(self, num_classes: int = 3, learning_rate: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 6))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.ReLU(), nn.Dropout(0.2), nn.Linear(5, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.head.parameters(), lr=self.hparams.learning_rate)


def run_transfer_learning(root_dir: Path, which: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Classifier()
    callback = CustomFinetuning(unfreeze_at_epoch=1, layers_per_epoch=2) if which == "custom" else BackboneFinetuning(
        unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 1.5, backbone_initial_ratio_lr=0.1, should_align=True,
        verbose=False)
    trainer = Trainer(default_root_dir=root_dir, max_epochs=4, callbacks=[callback], **QUIET)
    trainer.fit(model, loader(32, classes=3, shuffle=True))
    groups = [(len(group["params"]), group["lr"]) for group in trainer.optimizers[0].param_groups]
    return {"model": model, "trainer": trainer, "groups": groups,
            "trainable": [name for name, p in model.named_parameters() if p.requires_grad]}
