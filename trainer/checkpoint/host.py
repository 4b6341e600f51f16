"""What a checkpoint reads and restores of a run, typed: `StateHost` and `ShardHost`, and
`CheckpointHost` with `RunFolder`, the run as the run's `Checkpoints` (io.py) see it.

`collect_state`/`restore_state` (state.py) and `save_sharded` (sharded.py) are handed the
run's context (`trainer/loops/context.py`), which sits above them, so they name it through
these Protocols: exactly the public fields they touch, each with the little of its type they
use. The loop's own objects (the loop state, the data order, the fit loop, manual
optimization) appear as small Protocols too, since checkpoint/ never imports trainer/loops/.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from trainer._args import TrainerArgs
    from trainer.checkpoint.registry import StateRegistry

    from trainer.precision import Precision
    from trainer.strategies import Strategy

__all__ = ["StateHost", "ShardHost", "CheckpointHost", "RunFolder", "module_of"]


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class CallbackState(Stateful, Protocol):
    """A callback, as a checkpoint holds it (`trainer.Callback`)."""

    @property
    def state_key(self) -> str: ...


class Position(Stateful, Protocol):
    """Where the loop is (`LoopState`)."""

    @property
    def epoch(self) -> int: ...
    @property
    def batches_done(self) -> int: ...
    @property
    def global_step(self) -> int: ...


class DataPosition(Stateful, Protocol):
    """The epoch's data order (`DataOrder`)."""

    @property
    def fetching(self) -> bool: ...
    def unconsumed(self, epoch: int, batches_done: int) -> int: ...


class PendingWork(Protocol):
    """The running fit loop (`FitLoop`)."""

    def reconcile(self, raise_now: bool = True) -> None: ...
    def gradients_spent(self) -> bool: ...
    def rng_for_checkpoint(self) -> dict[str, Any] | None: ...


class ManualCut(Protocol):
    """Manual optimization (`ManualOptimization`): whether now is a step boundary."""

    def cut_problem(self) -> str | None: ...


class Scheduled(Protocol):
    @property
    def scheduler(self) -> Any: ...


class Optimizers(Protocol):
    """What `configure_optimizers` returned (`OptimizerSetup`)."""

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]: ...
    @property
    def schedulers(self) -> Sequence[Scheduled]: ...


class ShardHost(Protocol):
    """The run as `save_sharded` sees it."""

    @property
    def strategy(self) -> Strategy: ...
    @property
    def module(self) -> torch.nn.Module | None: ...
    @property
    def optimizers(self) -> Optimizers | None: ...


class StateHost(ShardHost, Protocol):
    """The run as `collect_state`/`restore_state` see it."""

    @property
    def args(self) -> TrainerArgs: ...
    @property
    def state(self) -> Position: ...
    @property
    def precision(self) -> Precision: ...
    @property
    def callbacks(self) -> Sequence[CallbackState]: ...
    @property
    def experiment_config(self) -> dict[str, Any] | None: ...
    @property
    def state_parts(self) -> StateRegistry:
        """What a checkpoint holds, part by part (`trainer/checkpoint/parts.py`)."""

    @property
    def fit_loop(self) -> PendingWork | None: ...
    @property
    def manual(self) -> ManualCut | None: ...
    @property
    def data_order(self) -> DataPosition: ...
    @property
    def datamodule(self) -> Any: ...
    @property
    def loggers(self) -> list[Any]:
        """The run's loggers (their run identities are saved, and continued on resume)."""

    def call(self, hook: str, *args: Any) -> None:
        """Call a hook on the callbacks and the module (`on_save_checkpoint`, `on_load_checkpoint`)."""


class RunFolder(Protocol):
    """The run's folder and loggers (`RunOutput`, `trainer/logging/output.py`), as checkpoints use them."""

    continued_dir: Path | None  # the folder of the run a resume continues (set here, when it is read)

    @property
    def run_dir(self) -> Path:
        """The run's folder (chosen, and created, on first read)."""

    @property
    def chosen_dir(self) -> Path | None:
        """The run's folder once chosen; None before (nothing created yet)."""

    def planned_dir(self) -> Path | None:
        """The run's folder when it is named, without creating anything; else None."""

    @property
    def loggers(self) -> list[Any]: ...
    @property
    def in_fit(self) -> bool: ...
    def flush(self) -> None: ...
    def release_unused_folder(self) -> None: ...


class CheckpointHost(StateHost, Protocol):
    """The run's context as `Checkpoints` sees it: what a checkpoint holds, and the run's folder."""

    @property
    def output(self) -> RunFolder: ...


def module_of(host: ShardHost) -> torch.nn.Module:
    """The Trainer's module; an AttributeError, as before, when it has none yet."""
    module = host.module
    if module is None:
        raise AttributeError(
            "The Trainer has no module yet, so there is nothing to checkpoint. Expected a call during or "
            "after fit/validate/test/predict."
        )
    return module
