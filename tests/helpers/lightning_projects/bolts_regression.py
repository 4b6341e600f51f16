"""Lightning Bolts' regression models (pl_bolts/models/regression: `LinearRegression` and
`LogisticRegression`, with L1 and L2 strengths and the optimizer class as a hyperparameter)
and its `PrintTableMetricsCallback` (pl_bolts/callbacks/printing.py), copied as written.

What Lightning 2.6 itself refuses was changed the minimal way, for both frameworks:
`validation_epoch_end(outputs)` / `test_epoch_end(outputs)` became
`on_validation_epoch_end()` / `on_test_epoch_end()` over the step outputs the module keeps
itself. Shrunk: synthetic data (8 features, 3 classes, 48 rows), two epochs; the table
callback prints with `print` instead of `rank_zero_info`, so the test can read it. Bolts'
`@under_review` decorator and argparse helpers are left out."""

from __future__ import annotations

import copy
from itertools import zip_longest
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torch.optim import Adam
from torch.optim.optimizer import Optimizer
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import functional

from trainer import Callback, LightningModule, Trainer, seed_everything


class LinearRegression(LightningModule):
    def __init__(self, input_dim: int, output_dim: int = 1, bias: bool = True, learning_rate: float = 1e-4,
                 optimizer: Type[Optimizer] = Adam, l1_strength: float = 0.0, l2_strength: float = 0.0, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.optimizer = optimizer
        self.linear = nn.Linear(in_features=self.hparams.input_dim, out_features=self.hparams.output_dim, bias=bias)
        self._val_outputs: List[Dict[str, Tensor]] = []
        self._test_outputs: List[Dict[str, Tensor]] = []

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)

    def training_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        x, y = batch
        x = x.view(x.size(0), -1)
        y_hat = self(x)
        loss = F.mse_loss(y_hat, y, reduction="sum")
        if self.hparams.l1_strength > 0:
            l1_reg = self.linear.weight.abs().sum()
            loss += self.hparams.l1_strength * l1_reg
        if self.hparams.l2_strength > 0:
            l2_reg = self.linear.weight.pow(2).sum()
            loss += self.hparams.l2_strength * l2_reg
        loss /= x.size(0)
        tensorboard_logs = {"train_mse_loss": loss}
        progress_bar_metrics = tensorboard_logs
        return {"loss": loss, "log": tensorboard_logs, "progress_bar": progress_bar_metrics}

    def validation_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        x, y = batch
        x = x.view(x.size(0), -1)
        y_hat = self(x)
        out = {"val_loss": F.mse_loss(y_hat, y)}
        self._val_outputs.append(out)
        return out

    def on_validation_epoch_end(self) -> None:  # was validation_epoch_end(outputs)
        outputs, self._val_outputs = self._val_outputs, []
        val_loss = torch.stack([x["val_loss"] for x in outputs]).mean()
        self.last_val = {"val_loss": val_loss, "log": {"val_mse_loss": val_loss}}

    def test_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        x, y = batch
        y_hat = self(x)
        out = {"test_loss": F.mse_loss(y_hat, y)}
        self._test_outputs.append(out)
        return out

    def on_test_epoch_end(self) -> None:  # was test_epoch_end(outputs)
        outputs, self._test_outputs = self._test_outputs, []
        self.last_test = torch.stack([x["test_loss"] for x in outputs]).mean()

    def configure_optimizers(self) -> Optimizer:
        return self.optimizer(self.parameters(), lr=self.hparams.learning_rate)


class LogisticRegression(LightningModule):
    criterion: nn.CrossEntropyLoss
    linear: nn.Linear

    def __init__(self, input_dim: int, num_classes: int, bias: bool = True, learning_rate: float = 1e-4,
                 optimizer: Type[Optimizer] = Adam, l1_strength: float = 0.0, l2_strength: float = 0.0, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.optimizer = optimizer
        self.criterion = nn.CrossEntropyLoss()
        self.linear = nn.Linear(in_features=self.hparams.input_dim, out_features=self.hparams.num_classes, bias=self.hparams.bias)
        self._outputs: Dict[str, List[Dict[str, Tensor]]] = {"val": [], "test": []}

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)

    def training_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        out = self._shared_step(batch, "val")
        self._outputs["val"].append(out)
        return out

    def test_step(self, batch: Tuple[Tensor, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        out = self._shared_step(batch, "test")
        self._outputs["test"].append(out)
        return out

    def on_validation_epoch_end(self) -> None:  # was validation_epoch_end(outputs)
        outputs, self._outputs["val"] = self._outputs["val"], []
        self._shared_epoch_end(outputs, "val")

    def on_test_epoch_end(self) -> None:  # was test_epoch_end(outputs)
        outputs, self._outputs["test"] = self._outputs["test"], []
        self._shared_epoch_end(outputs, "test")

    def configure_optimizers(self) -> Optimizer:
        return self.optimizer(self.parameters(), lr=self.hparams.learning_rate)

    def _prepare_batch(self, batch: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tensor]:
        x, y = batch
        x = x.view(x.size(0), -1)
        return self.linear(x), torch.as_tensor(y, dtype=torch.long)

    def _shared_step(self, batch: Tuple[Tensor, Tensor], stage: str) -> Dict[str, Tensor]:
        x, y = self._prepare_batch(batch)
        loss = self.criterion(x, y)
        if stage == "train":
            loss = self._regularization(loss)
            loss /= x.size(0)
            metrics = {"loss": loss}
            self.log_dict(metrics, on_step=True)
            return metrics
        acc = self._calculate_accuracy(x, y)
        return self._log_metrics(acc, loss, stage, on_step=True)

    def _shared_epoch_end(self, outputs: List[Dict[str, Tensor]], stage: str) -> Dict[str, Tensor]:
        acc = torch.stack([x[f"{stage}_acc"] for x in outputs]).mean()
        loss = torch.stack([x[f"{stage}_loss"] for x in outputs]).mean()
        return self._log_metrics(acc, loss, stage, on_epoch=True)

    def _log_metrics(self, acc: Tensor, loss: Tensor, stage: str, **kwargs: bool) -> Dict[str, Tensor]:
        metrics = {f"{stage}_loss": loss, f"{stage}_acc": acc}
        self.log_dict(metrics, **kwargs)
        return metrics

    def _calculate_accuracy(self, x: Tensor, y: Tensor) -> Tensor:
        _, y_hat = torch.max(x, dim=-1)
        return functional.accuracy(y_hat, y, task="multiclass", average="weighted", num_classes=self.hparams.num_classes, top_k=1)

    def _regularization(self, loss: Tensor) -> Tensor:
        if self.hparams.l1_strength > 0:
            l1_reg = self.linear.weight.abs().sum()
            loss += self.hparams.l1_strength * l1_reg
        if self.hparams.l2_strength > 0:
            l2_reg = self.linear.weight.pow(2).sum()
            loss += self.hparams.l2_strength * l2_reg
        return loss


class PrintTableMetricsCallback(Callback):
    def __init__(self) -> None:
        self.metrics: List = []
        self.printed: List[str] = []

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        metrics_dict = copy.copy(trainer.callback_metrics)
        self.metrics.append(metrics_dict)
        table = dicts_to_table(self.metrics)
        self.printed.append(table)
        print(table)


def dicts_to_table(
    dicts: List[Dict],
    keys: Optional[List[str]] = None,
    pads: Optional[List[str]] = None,
    fcodes: Optional[List[str]] = None,
    convert_headers: Optional[Dict[str, Callable]] = None,
    header_names: Optional[List[str]] = None,
    skip_none_lines: bool = False,
    replace_values: Optional[Dict[str, Any]] = None,
) -> str:
    # bolts' function as written, docstring left out
    # optional arg prelude
    if keys is None:
        if len(dicts) > 0:
            keys = dicts[0].keys()  # type: ignore[assignment]
        elif header_names is not None:
            keys = header_names
        else:
            raise ValueError("keys or header_names mandatory on empty input list")
    if pads is None:
        pads = [""] * len(keys)  # type: ignore[arg-type]
    elif len(pads) != len(keys):  # type: ignore[arg-type]
        raise ValueError(f"bad pad length {len(pads)}, expected: {len(keys)}")  # type: ignore[arg-type]
    if fcodes is None:
        fcodes = [""] * len(keys)  # type: ignore[arg-type]
    elif len(fcodes) != len(fcodes):
        raise ValueError(f"bad fcodes length {len(fcodes)}, expected: {len(keys)}")  # type: ignore[arg-type]
    if convert_headers is None:
        convert_headers = {}
    if header_names is None:
        header_names = keys
    if replace_values is None:
        replace_values = {}
    # build header
    headline = "│".join(f"{v:{pad}}" for v, pad in zip_longest(header_names, pads))  # type: ignore[arg-type]
    underline = "─" * len(headline)
    # suffix special keys to apply converters to later on
    marked_keys = [h + "____" if h in convert_headers else h for h in keys]  # type: ignore[union-attr]
    marked_values = {}
    s = "│".join(f"{{{h}:{pad}{fcode}}}" for h, pad, fcode in zip_longest(marked_keys, pads, fcodes))
    lines = [headline, underline]
    for d in dicts:
        none_keys = [k for k, v in d.items() if v is None]
        if skip_none_lines and none_keys:
            continue
        if replace_values:
            for k in d:
                if k in replace_values and d[k] in replace_values[k]:
                    d[k] = replace_values[k][d[k]]
                if d[k] is None:
                    raise ValueError(f"bad or no mapping for key '{k}' is None. Use skip or change replace mapping.")
        elif none_keys:
            raise ValueError(f"keys {none_keys} are None in {d}. Do skip or use replace mapping.")
        for h in convert_headers:
            if h in keys:  # type: ignore[operator]
                converter = convert_headers[h]
                marked_values[h + "____"] = converter(d)
        line = s.format(**d, **marked_values)
        lines.append(line)
    return "\n".join(lines)


def data(seed: int, classes: int | None) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(48, 8, generator=generator)
    if classes is None:
        y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(48, 1, generator=generator)
    else:
        y = (x[:, :classes]).argmax(dim=1)
    return TensorDataset(x, y)


def main(root_dir: str | Path, precision: str = "32-true", model: str = "logistic", **options: Any) -> dict[str, Any]:
    seed_everything(7)
    classes = 3 if model == "logistic" else None
    if model == "logistic":
        module: LightningModule = LogisticRegression(input_dim=8, num_classes=3, learning_rate=0.05, l1_strength=0.01, l2_strength=0.02, **options)
    else:
        module = LinearRegression(input_dim=8, learning_rate=0.05, l1_strength=0.01, l2_strength=0.02, **options)
    table = PrintTableMetricsCallback()
    trainer = Trainer(default_root_dir=root_dir, accelerator="cpu", max_epochs=2, precision=precision, callbacks=[table],
                      log_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(data(1, classes), batch_size=8, shuffle=True), DataLoader(data(2, classes), batch_size=16))
    validated = dict(trainer.callback_metrics)
    tested = trainer.test(module, DataLoader(data(3, classes), batch_size=16), verbose=False)[0]
    checkpoints = sorted(path.relative_to(Path(root_dir)).as_posix() for path in Path(root_dir).rglob("*.ckpt"))
    return {"model": module, "trainer": trainer, "val": validated, "test": tested, "table": table, "checkpoints": checkpoints}
