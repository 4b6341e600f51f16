"""`DataModule`: the data of an experiment in one object (Lightning's `LightningDataModule`).

Example:
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from trainer.datamodule import DataModule
    >>> class Ones(DataModule):
    ...     def __init__(self, batch_size: int = 4):
    ...         super().__init__()
    ...         self.batch_size = batch_size
    ...     def train_dataloader(self):
    ...         return DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=self.batch_size)
    >>> Ones(batch_size=2).hparams
    {'batch_size': 2}
"""

from __future__ import annotations

from typing import Any

from trainer._hparams import _capturing_init

__all__ = ["DataModule", "resolve_loaders", "is_datamodule"]

_LOADER = {"fit": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader", "predict": "predict_dataloader"}


class DataModule:
    """Override the `*_dataloader` methods a run needs; `prepare_data` (once, to download or
    write files) and `setup(stage)` (to build datasets) run before they are called, and
    `teardown(stage)` after the run. `state_dict`/`load_state_dict` travel in checkpoints.
    The `__init__` arguments are recorded in `self.hparams`, as for a Module."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_captures_hparams", False):
            cls.__init__ = _capturing_init(init)  # type: ignore[method-assign]

    #: The Trainer using this DataModule (set by fit/validate/test/predict), as in Lightning.
    trainer: Any = None

    def __init__(self) -> None:
        from trainer._hparams import _Captured

        if "hparams" not in self.__dict__:
            self.hparams: dict[str, Any] = _Captured()

    def save_hyperparameters(self, *names: str, ignore: str | list[str] | None = None) -> None:
        """Fill `self.hparams` now from the calling `__init__`'s arguments (Lightning's; they are
        also captured automatically after `__init__`)."""
        import inspect

        from trainer._hparams import hparams_of_caller

        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if caller is not None:
            self.hparams = hparams_of_caller(self, caller, names, ignore)

    def prepare_data(self) -> None:
        """Download or write data once (called before `setup`)."""

    def setup(self, stage: str) -> None:
        """Build the datasets of `stage` ("fit", "validate", "test" or "predict")."""

    def teardown(self, stage: str) -> None:
        """Release what `setup` made."""

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader(), which fit needs.")

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader(), which test needs.")

    def predict_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader(), which predict needs.")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


def is_datamodule(value: Any) -> bool:
    """A DataModule, or any object shaped like one (Lightning's, a YAML `data:` class)."""
    return isinstance(value, DataModule) or (
        callable(getattr(value, "train_dataloader", None)) and not hasattr(value, "__iter__")
    )


def resolve_loaders(stage: str, datamodule: Any, *loaders: Any) -> tuple[Any, ...]:
    """The loaders of `stage`: those given, or the datamodule's (after prepare_data and
    setup, in Lightning's order). Both given, or neither, is an error that says so."""
    given = any(loader is not None for loader in loaders)
    if datamodule is None:
        return loaders
    if given:
        raise ValueError(
            f"{stage}() received both loaders and a datamodule. Expected one of them: the datamodule's "
            f"{_LOADER[stage]}() or the loaders you pass."
        )
    for hook in ("prepare_data", "setup"):
        method = getattr(datamodule, hook, None)
        if callable(method):
            method(stage) if hook == "setup" else method()
    if stage == "fit":
        val = getattr(datamodule, "val_dataloader", None)
        return datamodule.train_dataloader(), (val() if callable(val) else None)
    return (getattr(datamodule, _LOADER[stage])(),)

