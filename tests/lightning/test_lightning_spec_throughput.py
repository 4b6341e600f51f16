"""ThroughputMonitor as Lightning's own tests specify it (tests_pytorch/callbacks/test_throughput_monitor.py),
each scenario run under Lightning and here, with only the imports changed, and compared: the
names written (with a `separator`), the steps they are written at, and the counts (batches,
samples, lengths) for a fit with `max_steps`, a batch size that varies, and a standalone
validate, test and predict. tests/callbacks/test_throughput_monitor.py compares a fit with
validation and accumulation.

Not compared: the times and rates. Lightning's test feeds `time.perf_counter` a list of
readings; how many times each implementation reads the clock is its own affair.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import re
import torch
from torch.utils.data import DataLoader
from trainer import Trainer
from callbacks import ThroughputMonitor
from trainer.demos.boring_classes import BoringModel, RandomDataset
from trainer.loggers import CSVLogger

COUNTS = ("batches", "samples", "lengths")
MONITOR = re.compile(r"^(train|validate|test|predict)[|/](time|batches|samples|lengths|device[|/].*)$")


class Recorder(CSVLogger):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def log_metrics(self, metrics, step=None):
        # the monitor's names only (this Trainer logs its own `train/loss`, `train/samples_per_sec`, ...)
        mine = {k: v for k, v in metrics.items() if MONITOR.match(k)}
        if mine:
            self.calls.append((step, sorted(mine), {k: v for k, v in mine.items() if re.split("[|/]", k)[-1] in COUNTS}))
        super().log_metrics(metrics, step)


def shown(calls):
    return [(step, names, {k: float(v) for k, v in counts.items()}) for step, names, counts in calls]


def fit(root, separator="/", variable=False, max_steps=5):
    """Lightning: test_throughput_monitor_fit, test_throughput_monitor_variable_batch_size."""
    sizes = iter([1, 2, 3, 4, 5, 6, 7, 8])

    def batch_size(batch):
        return next(sizes) if variable else 3

    torch.manual_seed(0)
    model = BoringModel()
    model.flops_per_batch = 10
    logger = Recorder(root)
    monitor = ThroughputMonitor(length_fn=lambda x: 6, batch_size_fn=batch_size, window_size=4, separator=separator)
    trainer = Trainer(default_root_dir=root, logger=logger, callbacks=monitor, max_steps=max_steps, log_every_n_steps=1,
                      limit_val_batches=0, num_sanity_val_steps=2, enable_checkpointing=False,
                      enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(model)
    return shown(logger.calls)


def evaluate(root, fn="validate"):
    """Lightning: test_throughput_monitor_eval."""
    torch.manual_seed(0)
    logger = Recorder(root)
    monitor = ThroughputMonitor(batch_size_fn=lambda x: 3, window_size=3, separator="|")
    trainer = Trainer(default_root_dir=root, logger=logger, callbacks=monitor, limit_val_batches=6,
                      limit_test_batches=6, limit_predict_batches=6, log_every_n_steps=3,
                      enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False)
    getattr(trainer, fn)(BoringModel(), **({} if fn == "predict" else {"verbose": False}))
    return shown(logger.calls)
'''

SPEC = Spec(SOURCE, "spec_throughput")


@pytest.mark.parametrize("options", [dict(separator="|"), dict(variable=True)], ids=["separator", "variable_batch"])
def test_throughput_fit(options: dict[str, object], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("fit", tmp_path, **options)
    assert ours == theirs


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_throughput_evaluation(fn: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("evaluate", tmp_path, fn=fn)
    assert ours == theirs
