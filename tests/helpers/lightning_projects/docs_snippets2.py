"""More of Lightning's documentation snippets (docs/source-pytorch), completed into runs with this
package's imports: the Trainer page (`should_stop` with `min_epochs`/`min_steps`, the properties
read inside a run, `enable_autolog_hparams`, `gradient_clip_algorithm=None`), the LightningModule
page (a task wrapping any model with `log_dict`, `save_checkpoint` + `load_from_checkpoint`,
`save_hyperparameters` with names and `ignore`, outputs kept for `on_train_epoch_end`,
`predict_step(self, batch)`), the data pages (a plain list as the training iterable, a dict of
lists of loaders), the training-tricks page (a `WeightAveraging` subclass with `should_update`,
`Tuner.lr_find`, reached as `L.pytorch.tuner.Tuner`), transfer learning (a `BaseFinetuning` subclass, `BackboneFinetuning`), the
logging pages (`reduce_fx`, `batch_size`, a plain int, `log_dict`, a torchmetrics `Metric`,
`log_hyperparams` with metrics) and inference (Monte Carlo dropout in `predict_step`,
`to_torchscript`).

Each `run_<page>(root_dir, ...)` returns what tests/lightning/test_lightning_docs_snippets2.py
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
from trainer import loggers as pl_loggers
from trainer.loggers.logger import Logger
from trainer.profilers import SimpleProfiler
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


def run_lightning_module(root_dir: Path) -> dict[str, Any]:
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


# -------------------------------------------------------------------------------- logging pages
class MyAccuracy(torchmetrics.Metric):
    def __init__(self, dist_sync_on_step: bool = False) -> None:
        super().__init__(dist_sync_on_step=dist_sync_on_step)
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        preds = preds.argmax(-1)
        assert preds.shape == target.shape
        self.correct += torch.sum(preds == target)
        self.total += target.numel()

    def compute(self) -> Tensor:
        return self.correct.float() / self.total


class LoggingModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)
        self.accuracy = MyAccuracy()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        preds = self.layer(x)
        loss = nn.functional.cross_entropy(preds, y)
        self.accuracy(preds, y)
        self.log("train_acc_step", self.accuracy)
        self.log("my_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        self.log("train_loss", loss, on_epoch=True)
        self.log("max_loss", loss, on_epoch=True, reduce_fx="max")
        self.log("sum_loss", loss, on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("mean_loss", loss, on_step=False, on_epoch=True, reduce_fx=torch.mean)
        self.log_dict({"loss_again": loss, "acc": (preds.argmax(-1) == y).float().mean()})
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        loss = nn.functional.cross_entropy(self.layer(x), y)
        self.log("val_loss", loss, batch_size=10)
        value = batch_idx + 1
        self.log("average_value", value)
        self.log("min_val", loss, reduce_fx="min")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run_logging(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = LoggingModel()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, log_every_n_steps=1, **QUIET)
    trainer.fit(model, loader(30, classes=3, shuffle=True), loader(20, seed=2, classes=3, batch_size=6))
    fitted = {key: float(value) for key, value in trainer.callback_metrics.items()}
    validated = trainer.validate(model, loader(20, seed=2, classes=3, batch_size=6), verbose=False)
    return {"model": model, "trainer": trainer, "validated": _floats(validated), "fitted": fitted}


# ------------------------------------------------------------------------------- inference pages
class LitMCdropoutModel(LightningModule):
    def __init__(self, model: nn.Module, mc_iteration: int) -> None:
        super().__init__()
        self.model = model
        self.dropout = nn.Dropout()
        self.mc_iteration = mc_iteration

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        x, _ = batch
        self.dropout.train()
        pred = [self.dropout(self.model(x)).unsqueeze(0) for _ in range(self.mc_iteration)]
        return torch.vstack(pred).mean(dim=0)


def run_inference(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = LitMCdropoutModel(nn.Linear(4, 3), mc_iteration=4)
    trainer = Trainer(default_root_dir=root_dir, **QUIET)
    predictions = trainer.predict(model, loader(16, seed=3))
    x = data(4, seed=4)[:][0]
    script = model.to_torchscript(method="trace", example_inputs=x)
    return {"model": model, "trainer": trainer, "predictions": torch.cat(predictions), "script": script(x),
            "eager": model(x), "training": model.training}


# ----------------------------------------------------------------- logging from every hook
LOGGING_HOOKS = ("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_before_backward", "on_after_backward",
                 "on_before_optimizer_step", "on_before_zero_grad", "on_train_batch_start", "on_train_batch_end",
                 "on_validation_start", "on_validation_epoch_start", "on_validation_epoch_end",
                 "on_validation_batch_start", "on_validation_batch_end")


def _value(module: LightningModule) -> Tensor:
    return module.layer.weight.detach().sum() + module.global_step


class HookLogging(Base):
    """`self.log` in each hook of the logging page's table of defaults."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y))


class CallbackLogging(L.Callback):
    """`pl_module.log` from a callback's hooks (the same table)."""


def _module_hook(name: str) -> Any:
    def hook(self: Any, *args: Any, **kwargs: Any) -> None:
        self.log(f"module/{name}", _value(self))
    return hook


def _callback_hook(name: str) -> Any:
    def hook(self: Any, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        pl_module.log(f"callback/{name}", _value(pl_module))
    return hook


for _name in LOGGING_HOOKS:
    setattr(HookLogging, _name, _module_hook(_name))
    setattr(CallbackLogging, _name, _callback_hook(_name))


def run_hook_logging(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = HookLogging()
    trainer = Trainer(default_root_dir=root_dir, max_epochs=2, callbacks=[CallbackLogging()], **QUIET)
    trainer.fit(model, loader(16, batch_size=4), loader(8, seed=2, batch_size=4))
    return {"model": model, "trainer": trainer,
            "logged": {key: float(value) for key, value in trainer.logged_metrics.items()}}


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


# -------------------------------------------------------------- loggers list, simple profiler
def run_loggers_and_profiler(root_dir: Path) -> dict[str, Any]:
    """`Trainer(logger=[csv_logger, tb_logger])` (the logging page's list) with the profiler
    page's `SimpleProfiler(dirpath=".", filename="perf_logs")`; the hyperparameters each logger
    writes, the report file."""
    torch.manual_seed(0)
    model = HparamsModel()
    model.on_train_start = lambda: None  # type: ignore[method-assign]  # the automatic hyperparameters only
    csv_logger = pl_loggers.CSVLogger(save_dir=root_dir / "logs")
    tb_logger = pl_loggers.TensorBoardLogger(save_dir=root_dir / "logs")
    trainer = Trainer(default_root_dir=root_dir, max_epochs=1, **{**QUIET, "logger": [csv_logger, tb_logger]},
                      profiler=SimpleProfiler(dirpath=root_dir, filename="perf_logs"))
    trainer.fit(model, loader(16), loader(8, seed=2))
    import yaml

    hparams = [yaml.safe_load((Path(each.log_dir) / "hparams.yaml").read_text()) for each in (csv_logger, tb_logger)]
    rows = (Path(csv_logger.log_dir) / "metrics.csv").read_text().splitlines()
    return {"model": model, "trainer": trainer, "logger": type(trainer.logger).__name__, "count": len(trainer.loggers),
            "hparams": hparams, "report": sorted(path.name for path in root_dir.glob("*perf_logs*")),
            "columns": sorted(rows[0].split(",")), "log_dir": Path(trainer.log_dir) == Path(csv_logger.log_dir)}


# ------------------------------------------------------------------------------------ hooks page
from trainer.demos import BoringModel  # noqa: E402
from callbacks import EarlyStopping  # noqa: E402


def run_hooks_order(root_dir: Path) -> dict[str, Any]:
    """The hooks page's `MyModel(BoringModel)` and `MyCallback` printing in `on_train_start`
    (callbacks first, then the module), and its exception for `on_train_epoch_end`: other
    callbacks, then the module, then the monitoring ones (an `EarlyStopping` subclass here)."""
    printed: list[str] = []

    class MyModel(BoringModel):
        def on_train_start(self) -> None:
            printed.append("Model: Training is starting!")

        def on_train_epoch_end(self) -> None:
            printed.append("Model: epoch end")

    class MyCallback(L.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            printed.append("Callback: Training is starting!")

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            printed.append("Callback: epoch end")

    class Stopping(EarlyStopping):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            printed.append("EarlyStopping: epoch end")
            super().on_train_epoch_end(trainer, pl_module)

    torch.manual_seed(0)
    model = MyModel()
    trainer = Trainer(default_root_dir=root_dir, callbacks=[Stopping(monitor="train_loss"), MyCallback()],
                      max_epochs=1, limit_train_batches=4, limit_val_batches=2, **QUIET)
    model.training_step = _logging_step(model)  # type: ignore[method-assign]
    trainer.fit(model)
    return {"model": model, "trainer": trainer, "printed": printed}


def _logging_step(model: Any) -> Any:
    step = type(model).training_step

    def training_step(batch: Any, batch_idx: int) -> Any:
        out = step(model, batch, batch_idx)
        model.log("train_loss", out["loss"])
        return out
    return training_step


class LogsAtEpochEnd(L.Callback):
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        pl_module.log("cb_metric", float(abs(trainer.current_epoch - 1)))


def run_callback_metric_stopping(root_dir: Path) -> dict[str, Any]:
    """An `EarlyStopping` listed before the callback whose `on_train_epoch_end` logs its monitor:
    it checks after that callback, as Lightning orders them."""
    torch.manual_seed(0)
    model = Base()
    stopping = EarlyStopping(monitor="cb_metric", patience=0, check_on_train_epoch_end=True)
    trainer = Trainer(default_root_dir=root_dir, max_epochs=5, callbacks=[stopping, LogsAtEpochEnd()], **QUIET)
    trainer.fit(model, loader(16))
    return {"model": model, "trainer": trainer, "stopped": stopping.stopped_epoch, "best": float(stopping.best_score)}
