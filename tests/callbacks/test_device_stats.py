"""DeviceStatsMonitor: the same keys at the same hooks and steps as Lightning's (a fake `psutil`
makes the CPU's numbers fixed), and its errors."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from callbacks import DeviceStatsMonitor
from callbacks.device_stats_monitor import device_stats

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from trainer.loggers import CSVLogger
from callbacks import DeviceStatsMonitor

CALLS = []


class Recorder(CSVLogger):
    def log_metrics(self, metrics, step=None):
        CALLS.extend((name, step, value) for name, value in metrics.items() if name.startswith("DeviceStats"))
        super().log_metrics(metrics, step)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run(root, **options):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
    model = Net()
    trainer = L.Trainer(max_epochs=2, callbacks=[DeviceStatsMonitor()], logger=Recorder(str(root)),
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(root), **options)
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    trainer.test(model, DataLoader(data, batch_size=8), verbose=False)
    return list(CALLS)
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from trainer.loggers import CSVLogger": "from lightning.pytorch.loggers import CSVLogger",
           "from callbacks import DeviceStatsMonitor": "from lightning.pytorch.callbacks import DeviceStatsMonitor"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin() -> str:
    return "\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines())


@pytest.fixture
def fake_psutil(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("psutil")
    fake.__spec__ = importlib.machinery.ModuleSpec("psutil", None)
    fake.virtual_memory = lambda: types.SimpleNamespace(percent=41.5)  # type: ignore[attr-defined]
    fake.swap_memory = lambda: types.SimpleNamespace(percent=2.0)  # type: ignore[attr-defined]
    fake.cpu_percent = lambda: 12.5  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "psutil", fake)


@pytest.mark.parametrize("options", [{"log_every_n_steps": 3}, {"log_every_n_steps": 2, "accumulate_grad_batches": 2},
                                     {"log_every_n_steps": 1, "max_steps": 4}])
def test_same_keys_hooks_and_steps_as_lightning(tmp_path: Path, fake_psutil: None, monkeypatch: pytest.MonkeyPatch,
                                                options: dict[str, Any]) -> None:
    pytest.importorskip("lightning")
    import lightning.pytorch.callbacks.device_stats_monitor as theirs_module

    monkeypatch.setattr(theirs_module, "_PSUTIL_AVAILABLE", True)  # Lightning looks for the installed package
    ours = _load(PROJECT, "dsm_ours").run(tmp_path / "ours", **options)
    theirs = _load(_twin(), "dsm_theirs").run(tmp_path / "theirs", **options)
    assert ours == theirs
    hooks = {name.split("/")[0] for name, _, _ in ours}
    assert {"DeviceStatsMonitor.on_train_batch_start", "DeviceStatsMonitor.on_validation_batch_end",
            "DeviceStatsMonitor.on_test_batch_start"} <= hooks
    assert ("DeviceStatsMonitor.on_train_batch_end/cpu_percent", 2, 12.5) in ours or options["log_every_n_steps"] != 3


def test_without_logger_or_psutil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _load(PROJECT, "dsm_errors")
    from trainer import Trainer

    trainer = Trainer(max_epochs=1, callbacks=[DeviceStatsMonitor()], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, root_dir=tmp_path)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1)))
    with pytest.raises(ValueError, match="logger=False"):
        trainer.fit(module.Net(), data)
    monkeypatch.setitem(sys.modules, "psutil", None)  # not installed
    trainer = Trainer(max_epochs=1, callbacks=[DeviceStatsMonitor()], enable_checkpointing=False,
                      enable_progress_bar=False, root_dir=tmp_path)
    with pytest.raises(ModuleNotFoundError, match="pip install psutil"):
        trainer.fit(module.Net(), data)
    # cpu_stats=False on the CPU: nothing to read, nothing needed
    trainer = Trainer(max_epochs=1, callbacks=[DeviceStatsMonitor(cpu_stats=False)], enable_checkpointing=False,
                      enable_progress_bar=False, root_dir=tmp_path)
    trainer.fit(module.Net(), data)
    assert trainer.global_step == 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_memory_stats() -> None:
    stats = device_stats(torch.device("cuda", 0))
    assert "allocated_bytes.all.current" in stats


def test_every_rank_runs_under_ddp_and_rank_zero_writes(tmp_path: Path) -> None:
    """Under DDP the loggers exist on rank 0 only; the other ranks must not refuse to start."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    worker = root / "tests" / "helpers" / "scripts" / "device_stats_worker.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)] == ["4", "4"]
    written = "".join(p.read_text() for p in (tmp_path / "logs").rglob("metrics.csv"))
    assert "DeviceStatsMonitor.on_train_batch_end/cpu_percent" in written
