"""What the run's output reads of the run, typed: `RunHost`.

`RunOutput` (output.py) is handed the run's context (`trainer/loops/context.py`), which sits
above it, so it names the context through these Protocols: the public fields it touches, each
with the little of its type it uses. The run's checkpoints appear as `ResumePoint`, since
logging/ never imports trainer/checkpoint/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from trainer.logging.metrics import MetricStore
from trainer.logging.summary import SummaryHost

__all__ = ["RunHost", "RunPosition", "ResumePoint"]


class RunPosition(Protocol):
    """Where the loop is (`LoopState`), as the run's output reports it."""

    @property
    def epoch(self) -> int: ...
    @property
    def batches_done(self) -> int: ...
    @property
    def global_step(self) -> int: ...
    @property
    def skipped_steps(self) -> int: ...


class Optimizers(Protocol):
    """What `configure_optimizers` returned (`OptimizerSetup`): their learning rates are logged."""

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]: ...


class ResumePoint(Protocol):
    """The run's checkpoints (`Checkpoints`, trainer/checkpoint/io.py), as its output reads them."""

    @property
    def resumed_at(self) -> int | None:
        """The step a resumed fit started at: epoch-level values there may be in the trackers already."""


class RunHost(SummaryHost, Protocol):
    """The run's context as `RunOutput` sees it (`trainer/loops/context.py`): what the summary
    reads, and the rest below."""

    at_run_start: list[Callable[[], None]]  # what the YAML layer runs once a run starts

    @property
    def state(self) -> RunPosition: ...
    @property
    def module(self) -> torch.nn.Module | None: ...
    @property
    def callbacks(self) -> Sequence[Any]: ...
    @property
    def experiment_config(self) -> dict[str, Any] | None: ...
    @property
    def optimizers(self) -> Optimizers | None: ...
    @property
    def checkpoints(self) -> ResumePoint: ...
    @property
    def metrics(self) -> MetricStore: ...
    @property
    def sanity_checking(self) -> bool: ...
    @property
    def datamodule(self) -> Any:
        """The DataModule of the running call, if any (its batch transfer hooks)."""
    @property
    def trainer(self) -> Any:
        """The Trainer (its public properties: `num_training_batches`, `estimated_stepping_batches`)."""
