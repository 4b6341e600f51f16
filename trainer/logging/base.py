"""`Logger`: the type every logger is an instance of, and the base class of a logger of your
own written the Lightning way (`from trainer.loggers.logger import Logger, rank_zero_experiment`).

Any object with `log_metrics(metrics, step)`, `log_hyperparams(params)`, `flush()`, `close()`
and `log_dir` is a logger to the Trainer, and `isinstance(obj, Logger)` is True for it.
A subclass of `Logger` is written as for Lightning: it defines `name`, `version`,
`log_metrics` and `log_hyperparams`, and may define `save_dir`, `log_dir`, `experiment`,
`save()`, `finalize(status)`, `after_save_checkpoint(checkpoint_callback)` and `log_graph`.
The Trainer then calls it as Lightning does (`lightning_style`): `log_hyperparams` with the
module's saved hyperparameters (merged with the DataModule's), `save()` after every write,
and `finalize("success")` (or `"failed"` after an error) when a run ends.

Example:
    >>> class Printer(Logger):
    ...     name, version = "printer", 0
    ...     def log_metrics(self, metrics, step=None):
    ...         print(step, dict(metrics))
    ...     def log_hyperparams(self, params, *args, **kwargs):
    ...         pass
    >>> Printer().log_metrics({"loss": 0.5}, step=3)
    3 {'loss': 0.5}
    >>> class Duck:  # the methods alone make a logger
    ...     log_dir = None
    ...     def log_metrics(self, metrics, step): ...
    ...     def log_hyperparams(self, params, metrics=None): ...
    ...     def flush(self): ...
    ...     def close(self): ...
    >>> isinstance(Duck(), Logger)
    True
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer.strategies.rank_zero import rank_zero_only

__all__ = [
    "Logger", "DummyLogger", "rank_zero_experiment", "lightning_style", "lightning_run_dir", "finish", "write", "log_hyperparams",
    "PROTOCOL",
]

#: what makes an object a logger to the Trainer
PROTOCOL = ("log_metrics", "log_hyperparams", "flush", "close", "log_dir")


class _LoggerType(abc.ABCMeta):
    def __instancecheck__(cls, instance: Any) -> bool:
        """Also an object whose `log_dir` (or a method) is set on the instance itself; nothing is
        read, so a logger's folder is not made by the check."""
        if super().__instancecheck__(instance):
            return True
        if cls is not Logger:
            return False
        names = set(dir(type(instance))) | set(getattr(instance, "__dict__", {}))
        return all(name in names for name in PROTOCOL)


class Logger(metaclass=_LoggerType):
    """The logger type (see the module): Lightning's base class with its defaults, and an
    `isinstance` check that any object with the logger's methods passes."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is Logger:
            found = {name for klass in other.__mro__ for name in vars(klass)}
            if all(name in found for name in PROTOCOL):
                return True
        return NotImplemented  # type: ignore[return-value]  # ABC's protocol: decide the usual way

    @property
    @abc.abstractmethod
    def name(self) -> str | None:
        """The experiment's name (a folder under `save_dir` for the run's checkpoints)."""

    @property
    @abc.abstractmethod
    def version(self) -> int | str | None:
        """The run's version (an int `n` is the folder `version_n`)."""

    @abc.abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Write `metrics` (name -> float) at `step`."""

    @abc.abstractmethod
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Record the run's hyperparameters."""

    @property
    def save_dir(self) -> str | None:
        """Where the logger writes; None: nowhere on disk (the Trainer's root folder is used)."""
        return None

    @property
    def root_dir(self) -> str | None:
        return None

    @property
    def log_dir(self) -> str | None:
        return None

    @property
    def group_separator(self) -> str:
        return "/"

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the module's graph (nothing by default)."""

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called after a checkpoint was written (nothing by default)."""

    def save(self) -> None:
        """Persist what was logged (nothing by default); called after every write."""

    def finalize(self, status: str) -> None:
        """The run ended with `status` ("success" or "failed"): by default, `save()`."""
        self.save()

    def flush(self) -> None:
        """Nothing: the Trainer calls `save()` after every write already."""

    def close(self) -> None:
        self.finalize("success")


def lightning_style(logger: Any) -> bool:
    """A logger written the Lightning way (a subclass of `Logger`): the Trainer calls `save()`
    after every write and `finalize(status)` at the end, and logs the module's hyperparameters."""
    return Logger in type(logger).__mro__


def lightning_run_dir(logger: Logger, root: Path) -> Path:
    """The run's folder (checkpoints, `trainer.log_dir`) for a `Logger` subclass without a
    `log_dir`: `save_dir/name/version` (`root` without `save_dir`), where Lightning puts the
    run's `checkpoints/` folder; an int version `n` is `version_n`."""
    version = logger.version
    folder = Path(logger.save_dir or root) / str(logger.name) / (version if isinstance(version, str) else f"version_{version}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def finish(logger: Any, failed: bool) -> None:
    """A run's end: a `Logger` subclass gets `finalize("failed" or "success")`, as from
    Lightning; any other logger `flush()` then `close()`."""
    if lightning_style(logger):
        logger.finalize("failed" if failed else "success")
    else:
        logger.flush()
        logger.close()


def write(logger: Any, metrics: Mapping[str, float], step: int) -> None:
    """`logger.log_metrics(metrics, step=step)`; a `Logger` subclass then gets `save()`, as from Lightning."""
    logger.log_metrics(metrics, step=step)
    if lightning_style(logger):
        logger.save()


def log_hyperparams(logger: Any, params: Mapping[str, Any], lightning_params: Mapping[str, Any] | None,
                    metrics: Mapping[str, float] | None = None) -> None:
    """The run's hyperparameters to `logger`: a `Logger` subclass gets Lightning's (`lightning_params`,
    the module's saved hyperparameters), then `save()`; any other logger `params`."""
    if lightning_style(logger) and lightning_params is not None:
        logger.log_hyperparams(lightning_params)
        logger.save()
    else:
        logger.log_hyperparams(params, metrics)


def rank_zero_experiment(fn: Callable[..., Any]) -> Callable[..., Any]:
    """For a logger's `experiment` property: on ranks other than 0 it returns an object
    that accepts every call and does nothing, so `logger.experiment.add_image(...)` runs
    everywhere and writes from rank 0 only."""

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        return rank_zero_only(lambda: fn(self), _NOTHING)()

    return experiment


class _Nothing:
    """Accepts any call, attribute or index and does nothing (`experiment` off rank 0)."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Nothing:
        return self

    def __getattr__(self, name: str) -> _Nothing:
        return self

    def __getitem__(self, index: Any) -> _Nothing:
        return self

    def __bool__(self) -> bool:
        return False


_NOTHING = _Nothing()


class DummyLogger(Logger):
    """A logger that writes nothing (Lightning's, for `fast_dev_run`-style runs and tests)."""

    @property
    def experiment(self) -> Any:
        return _NOTHING

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def __getitem__(self, index: int) -> DummyLogger:
        return self

    def __iter__(self) -> Any:
        yield from ()

    def __getattr__(self, name: str) -> Callable[..., None]:
        """Any other public method (a tracker's `log_image`, ...) does nothing; the Trainer's own
        questions to a logger (`continue_run`, `written_at`, ...) and private names stay unanswered."""
        if name.startswith("_") or name in _ASKED_BY_THE_TRAINER:
            raise AttributeError(f"DummyLogger has no attribute {name!r}")

        def method(*args: Any, **kwargs: Any) -> None:
            return None

        return method


#: what the Trainer looks up on a logger to learn what it can do: a DummyLogger can do none of it
_ASKED_BY_THE_TRAINER = frozenset({
    "loggers", "continue_run", "run_identity", "written_at", "release_unused_folder", "state_dict", "load_state_dict",
    "root_dir", "trainer_setting", "trainer_instead",
})
