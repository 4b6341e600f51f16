"""DeviceStatsMonitor on the CPU as Lightning's own tests specify it
(tests_pytorch/callbacks/test_device_stats_monitor.py), each scenario run under Lightning and here,
with only the imports changed, and compared: the names and steps written for `cpu_stats` None,
True and False through a fit, a validation and a test, the refusal without a logger, and the
error without `psutil`. `psutil` is replaced by a stand-in with fixed readings, so both read the
same values (and the tests run where it is not installed).

Not compared: the GPU and TPU statistics (no such device here) and `filter_keys` (newer than the
Lightning installed here).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from trainer import Trainer
from callbacks import DeviceStatsMonitor
from trainer.demos.boring_classes import BoringModel
from trainer.loggers import CSVLogger


class Recorder(CSVLogger):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def log_metrics(self, metrics, step=None):
        mine = {k: float(v) for k, v in metrics.items() if k.startswith("DeviceStatsMonitor")}
        if mine:
            self.calls.append((step, mine))
        super().log_metrics(metrics, step)


def stats(root, cpu_stats=None):
    """Lightning: test_device_stats_cpu, test_device_stats_monitor_logs_for_different_stages."""
    torch.manual_seed(0)
    logger = Recorder(root)
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=3, limit_val_batches=2,
                      limit_test_batches=1, log_every_n_steps=2, callbacks=DeviceStatsMonitor(cpu_stats=cpu_stats),
                      logger=logger, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      accelerator="cpu", num_sanity_val_steps=0)
    model = BoringModel()
    trainer.fit(model)
    trainer.test(model, verbose=False)
    return logger.calls


def refused(root):
    """Lightning: test_device_stats_monitor_no_logger."""
    trainer = Trainer(default_root_dir=root, callbacks=[DeviceStatsMonitor()], max_epochs=1, limit_train_batches=1,
                      limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    try:
        trainer.fit(BoringModel())
    except Exception as error:  # Lightning's MisconfigurationException; ours a ValueError
        return "logger" in str(error)
    return "no error"


def without_psutil(root, cpu_stats=None):
    """Lightning: test_device_stats_monitor_warning_when_psutil_not_available."""
    trainer = Trainer(default_root_dir=root, callbacks=[DeviceStatsMonitor(cpu_stats=cpu_stats)], max_epochs=1,
                      limit_train_batches=1, limit_val_batches=0, logger=CSVLogger(root), enable_checkpointing=False,
                      enable_progress_bar=False, accelerator="cpu")
    try:
        trainer.fit(BoringModel())
    except ModuleNotFoundError as error:
        return "psutil" in str(error)
    return "no error"
'''

SPEC = Spec(SOURCE, "spec_device_stats")


def _fake_psutil() -> types.ModuleType:
    fake = types.ModuleType("psutil")
    fake.virtual_memory = lambda: types.SimpleNamespace(percent=41.5)  # type: ignore[attr-defined]
    fake.swap_memory = lambda: types.SimpleNamespace(percent=2.25)  # type: ignore[attr-defined]
    fake.cpu_percent = lambda *args, **kwargs: 12.0  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def psutil_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in `psutil`, which Lightning's check (a requirement cache) is also told is there."""
    import lightning.pytorch.accelerators.cpu as lightning_cpu
    import lightning.pytorch.callbacks.device_stats_monitor as lightning_monitor

    monkeypatch.setitem(sys.modules, "psutil", _fake_psutil())
    monkeypatch.setattr(lightning_cpu, "_PSUTIL_AVAILABLE", True)
    monkeypatch.setattr(lightning_monitor, "_PSUTIL_AVAILABLE", True)


@pytest.mark.parametrize("cpu_stats", [None, True, False])
def test_cpu_stats(cpu_stats: Any, tmp_path: Path, psutil_present: None) -> None:
    ours, theirs = SPEC.compare("stats", tmp_path, cpu_stats=cpu_stats)
    assert ours == theirs
    assert bool(ours) == (cpu_stats is not False)


def test_refused_without_a_logger(tmp_path: Path, psutil_present: None) -> None:
    ours, theirs = SPEC.compare("refused", tmp_path)
    assert ours == theirs == True  # noqa: E712


def test_without_psutil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning.pytorch.accelerators.cpu as lightning_cpu
    import lightning.pytorch.callbacks.device_stats_monitor as lightning_monitor

    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` fails
    monkeypatch.setattr(lightning_cpu, "_PSUTIL_AVAILABLE", False)
    monkeypatch.setattr(lightning_monitor, "_PSUTIL_AVAILABLE", False)
    ours, theirs = SPEC.compare("without_psutil", tmp_path)
    assert ours == theirs == True  # noqa: E712
