"""ThroughputMonitor: Lightning's metric names, at Lightning's steps, with the same counts."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from callbacks import ThroughputMonitor
from callbacks.throughput_monitor import Throughput

PROJECT = '''
import re
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from trainer.loggers import CSVLogger
from callbacks import ThroughputMonitor

CALLS = []
NAME = re.compile(r"^(train|validate|test|predict)/(time|batches|samples|lengths|device/.*)$")


class Recorder(CSVLogger):
    def log_metrics(self, metrics, step=None):
        mine = {k: v for k, v in metrics.items() if NAME.match(k)}
        if mine:
            CALLS.append((step, mine))
        super().log_metrics(metrics, step)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.flops_per_batch = 100

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        pass

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run(root, **options):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
    monitor = ThroughputMonitor(batch_size_fn=lambda b: b[0].size(0), length_fn=lambda b: 3 * b[0].size(0),
                                window_size=2)
    trainer = L.Trainer(max_epochs=2, callbacks=[monitor], logger=Recorder(str(root)), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root),
                        num_sanity_val_steps=2, **options)
    trainer.fit(Net(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    trainer.test(Net(), DataLoader(data, batch_size=8), verbose=False)
    return list(CALLS)
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from trainer.loggers import CSVLogger": "from lightning.pytorch.loggers import CSVLogger",
           "from callbacks import ThroughputMonitor": "from lightning.pytorch.callbacks import ThroughputMonitor"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin() -> str:
    return "\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines())


def _counts(calls: list[Any]) -> list[Any]:
    """Each write's step, names and the counts (the rates and times depend on the clock)."""
    return [(step, sorted(metrics), {k: v for k, v in metrics.items() if k.split("/")[-1] in ("batches", "samples",
                                                                                              "lengths")})
            for step, metrics in calls]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("options", [{"log_every_n_steps": 2}, {"log_every_n_steps": 3, "accumulate_grad_batches": 2}])
def test_names_steps_and_counts_as_lightning(tmp_path: Path, options: dict[str, Any]) -> None:
    pytest.importorskip("lightning")
    ours = _load(PROJECT, "tm_ours").run(tmp_path / "ours", **options)
    theirs = _load(_twin(), "tm_theirs").run(tmp_path / "theirs", **options)
    assert _counts(ours) == _counts(theirs)
    names = set().union(*(m for _, m in ours))
    assert {"train/device/samples_per_sec", "train/device/batches_per_sec", "train/device/items_per_sec",
            "train/device/flops_per_sec", "validate/device/samples_per_sec", "test/samples"} <= names
    assert all(v > 0 for _, m in ours for k, v in m.items() if k.endswith("per_sec"))


def test_throughput_window() -> None:
    meter = Throughput(world_size=2, window_size=3, available_flops=1000.0)
    for i in range(1, 5):
        meter.update(time=float(i), batches=i, samples=4 * i, lengths=12 * i, flops=50)
    out = meter.compute()
    assert out["device/samples_per_sec"] == 4.0 and out["samples_per_sec"] == 8.0
    assert out["device/items_per_sec"] == 12.0 and out["items_per_sec"] == 24.0
    assert out["flops_per_sec"] == 100.0 and out["device/flops_per_sec"] == 50.0 and out["device/mfu"] == 0.05
    with pytest.raises(ValueError, match="window_size"):
        ThroughputMonitor(len, window_size=1)
    with pytest.raises(ValueError, match="not supported"):
        ThroughputMonitor(len, available_flops=1)
