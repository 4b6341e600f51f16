"""Lightning's documentation snippets, completed into runs with this package's imports (the
third part of docs_snippets2.py's set): the logging pages
(`reduce_fx`, `batch_size`, a plain int, `log_dict`, a torchmetrics `Metric`, `self.log` from
every hook of the page's table in a module and in a callback, a list of loggers), the profiler
page (`SimpleProfiler(dirpath, filename)`), inference (Monte Carlo dropout in `predict_step`,
`to_torchscript`) and the hooks page (callbacks, module and monitoring callbacks in order).

Each `run_<page>(root_dir)` returns what the docs-snippets comparison test
compares with Lightning's run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torchmetrics
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import BasePredictionWriter, EarlyStopping
from trainer import LightningModule, Trainer
from trainer import loggers as pl_loggers
from trainer.demos import BoringModel
from trainer.profilers import SimpleProfiler

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


class CustomWriter(BasePredictionWriter):
    """The production page's writer: one file of predictions and one of batch indices per rank."""

    def __init__(self, output_dir: Path, write_interval: str) -> None:
        super().__init__(write_interval)
        self.output_dir = output_dir

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        torch.save(predictions, self.output_dir / f"predictions_{trainer.global_rank}.pt")
        torch.save(batch_indices, self.output_dir / f"batch_indices_{trainer.global_rank}.pt")


def run_prediction_writer(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = BoringModel()
    root_dir.mkdir(parents=True, exist_ok=True)
    pred_writer = CustomWriter(output_dir=root_dir, write_interval="epoch")
    trainer = Trainer(default_root_dir=root_dir, callbacks=[pred_writer], **QUIET)
    returned = trainer.predict(model, return_predictions=False)
    files = sorted(path.name for path in root_dir.glob("*.pt"))
    return {"model": model, "trainer": trainer, "returned": returned, "files": files,
            "predictions": torch.load(root_dir / "predictions_0.pt"),
            "batch_indices": torch.load(root_dir / "batch_indices_0.pt")}


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


# -------------------------------------------------------------- loggers list, simple profiler
class HparamsModel(Base):
    def __init__(self, learning_rate: float = 0.1, another_parameter: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("hp/metric_1", nn.functional.mse_loss(self.layer(x), y))
        self.log("hp/metric_2", nn.functional.l1_loss(self.layer(x), y))


def run_loggers_and_profiler(root_dir: Path) -> dict[str, Any]:
    """`Trainer(logger=[csv_logger, tb_logger])` (the logging page's list) with the profiler
    page's `SimpleProfiler(dirpath=".", filename="perf_logs")`; the hyperparameters each logger
    writes, the report file."""
    torch.manual_seed(0)
    model = HparamsModel()
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
