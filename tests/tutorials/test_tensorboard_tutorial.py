"""intermediate_source/tensorboard_tutorial.py, ported to a LightningModule with this package's
imports (tests/helpers/tutorials/tensorboard_tutorial.py).

The tutorial writes its running loss and per-class precision-recall curves with its own
`SummaryWriter`; the port writes them through `self.logger.experiment` (the run's
`SummaryWriter`) at the tutorial's steps. Run here and under Lightning in one process, the port
trains to the weights of the tutorial's loop (`torch.equal`), and the event files hold the
tutorial's `"training loss"` points and curves exactly (beside the Trainer's own scalars and its hyperparameter text).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import tensorboard_tutorial as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def events(log_dir: Path | str) -> dict[str, Any]:
    """The tutorial's scalar as (step, value) points, and each class's curve as its values."""
    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    curves = {tag: [(e.step, np.nan_to_num(tensor_util.make_ndarray(e.tensor_proto), nan=-1.0).tolist())
                    for e in acc.Tensors(tag)] for tag in tutorial.classes}  # NaN (0/0 precision) != NaN
    return {"training loss": [(e.step, e.value) for e in acc.Scalars("training loss")], "curves": curves}


def test_the_port_writes_the_tutorials_events_here_and_under_lightning(tmp_path: Path) -> None:
    reference = tutorial.original(tmp_path / "tutorial")
    expected = events(tmp_path / "tutorial" / "runs" / "fashion_mnist_experiment_1")
    assert [step for step, _ in expected["training loss"]] == [3, 7]
    assert not np.isnan(np.array(expected["curves"]["Trouser"][0][1])).all()
    for framework in ("ours", "lightning"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's note on few loader workers
            run = load_file(SOURCE, framework).main(tmp_path / framework)
        assert_same_weights(run["model"], reference)
        assert events(run["log_dir"]) == expected, framework
