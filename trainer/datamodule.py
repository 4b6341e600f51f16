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

import copy
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainer._hparams import AttributeDict, _capturing_init, read_hparams_file
from trainer.states import TrainerFn

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

    _saves_hyperparameters = True  # a frame of its __init__ is part of save_hyperparameters' chain
    #: The Trainer using this DataModule (set by fit/validate/test/predict), as in Lightning.
    trainer: Any = None
    #: A name for the data, for your own use (Lightning's attribute; nothing here reads it).
    name: str | None = None
    #: The keys Lightning's checkpoints use for a DataModule's hyperparameters.
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    def __init__(self) -> None:
        from trainer._hparams import _Captured

        if "hparams" not in self.__dict__:
            self.hparams: dict[str, Any] = _Captured()

    def save_hyperparameters(self, *names: Any, ignore: str | list[str] | None = None, frame: Any = None,
                             logger: bool = True) -> None:
        """Record `__init__` arguments in `self.hparams` now, by `Module.save_hyperparameters`'
        rules (the whole chain of `__init__` calls; names, one dict or `argparse.Namespace`,
        `ignore`; a second call adds); `frame` starts from another frame, `logger` is accepted."""
        import inspect

        from trainer._hparams import save_hyperparameters

        current = inspect.currentframe()
        caller = frame if frame is not None else current.f_back if current is not None else None
        if caller is not None:
            save_hyperparameters(self, caller, names, ignore)

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyperparameters as first recorded (by `save_hyperparameters`, or the
        `__init__` arguments captured automatically): later changes to `hparams` do not show."""
        if "_hparams_initial" not in self.__dict__:
            self._hparams_initial = copy.deepcopy(AttributeDict(getattr(self, "hparams", {})))
        return AttributeDict(copy.deepcopy(self._hparams_initial))

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

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it is moved to the device; overridden here, it replaces the module's."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Move a batch to `device`; overridden here, it replaces the module's."""
        from trainer._utils import move_to_device

        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the device; overridden here, it replaces the module's."""
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""

    def on_exception(self, exception: BaseException) -> None:
        """Called when the run using this DataModule fails, before the error propagates."""

    @classmethod
    def from_datasets(
        cls, train_dataset: Any = None, val_dataset: Any = None, test_dataset: Any = None, predict_dataset: Any = None,
        batch_size: int = 1, num_workers: int = 0, **datamodule_kwargs: Any,
    ) -> DataModule:
        """A DataModule whose loaders read the given datasets (Lightning's). Each may also be a
        list or dict of datasets (then a list or dict of loaders). Training loaders shuffle
        (not an IterableDataset); `batch_size` and `num_workers` go to every loader, and to
        `__init__` too where it takes them, with `datamodule_kwargs`. Loaders pin memory
        when CUDA is available (Lightning always asks for it).

        Example:
            >>> import torch
            >>> from torch.utils.data import TensorDataset
            >>> data = DataModule.from_datasets(train_dataset=TensorDataset(torch.ones(8, 1)), batch_size=4)
            >>> len(data.train_dataloader())
            2
        """
        def loader(dataset: Any, shuffle: bool = False) -> Any:
            return _apply(dataset, lambda single: torch.utils.data.DataLoader(
                single, batch_size=batch_size, num_workers=num_workers, pin_memory=torch.cuda.is_available(),
                shuffle=shuffle and not isinstance(single, torch.utils.data.IterableDataset),
            ))

        parameters = inspect.signature(cls.__init__).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        special = {k: v for k, v in {"batch_size": batch_size, "num_workers": num_workers}.items()
                   if takes_any or k in parameters}
        datamodule = cls(**datamodule_kwargs, **special)
        for method, dataset, shuffle in (("train_dataloader", train_dataset, True), ("val_dataloader", val_dataset, False),
                                         ("test_dataloader", test_dataset, False),
                                         ("predict_dataloader", predict_dataset, False)):
            if dataset is not None:
                setattr(datamodule, method, lambda dataset=dataset, shuffle=shuffle: loader(dataset, shuffle))
        return datamodule

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | Path, map_location: Any = None,
                             hparams_file: str | Path | None = None, **kwargs: Any) -> Any:
        """`cls(**hyperparameters)` from a checkpoint's DataModule hyperparameters (Lightning's
        `datamodule_hyper_parameters`), updated by `hparams_file` (YAML) and `kwargs`, then its
        saved state (`load_state_dict`). Reads Lightning 2.x files and ours; executes nothing.

        Example:
            >>> data = MyData.load_from_checkpoint("last.ckpt", batch_size=64)  # doctest: +SKIP
        """
        from trainer.checkpoint.format import load_checkpoint

        checkpoint = load_checkpoint(checkpoint_path, map_location=map_location or "cpu")
        hparams = dict(checkpoint.get(_HPARAMS_KEY) or {})
        if hparams_file is not None:
            hparams = read_hparams_file(hparams_file, f"{cls.__name__}.load_from_checkpoint", module_part=False)
        hparams.update(kwargs)
        parameters = inspect.signature(cls.__init__).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            hparams = {k: v for k, v in hparams.items() if k in parameters and k != "self"}
        datamodule = cls(**hparams)
        state = checkpoint.get(cls.__qualname__, checkpoint.get("datamodule"))
        if state is not None:
            datamodule.load_state_dict(state)
        return datamodule


#: Where a checkpoint holds a DataModule's hyperparameters (Lightning's key).
_HPARAMS_KEY = "datamodule_hyper_parameters"


def _apply(datasets: Any, make: Any) -> Any:
    """`make` on a dataset, or on each of a list/tuple/dict of them (Lightning's rule)."""
    if isinstance(datasets, torch.utils.data.Dataset):
        return make(datasets)
    if isinstance(datasets, Mapping):
        return {key: _apply(value, make) for key, value in datasets.items()}
    if isinstance(datasets, (list, tuple)):
        return [_apply(value, make) for value in datasets]
    return make(datasets)


def is_datamodule(value: Any) -> bool:
    """A DataModule, or any object shaped like one (Lightning's, a YAML `data:` class)."""
    return isinstance(value, DataModule) or (
        callable(getattr(value, "train_dataloader", None)) and not hasattr(value, "__iter__")
    )


def resolve_loaders(stage: str, datamodule: Any, *loaders: Any, call: bool = True) -> tuple[Any, ...]:
    """The loaders of `stage`: those given, or the datamodule's (after its setup; the Trainer
    ran prepare_data before, in Lightning's order). Both given, or neither, is an error that says so.
    `call=False`: only the datamodule's setup; its loaders are asked for later (None here)."""
    given = any(loader is not None for loader in loaders)
    if datamodule is None:
        return loaders
    if given:
        raise ValueError(
            f"{stage}() received both loaders and a datamodule. Expected one of them: the datamodule's "
            f"{_LOADER[stage]}() or the loaders you pass."
        )
    setup = getattr(datamodule, "setup", None)  # prepare_data ran before (the Trainer's, rank-aware)
    if callable(setup):
        setup(stage=TrainerFn(stage))  # by name, as Lightning passes it; the enum: equal to "fit", f-strings show "TrainerFn.FITTING"
    if not call:
        return (None,) * len(loaders)
    if stage == "fit":
        val = getattr(datamodule, "val_dataloader", None)
        return datamodule.train_dataloader(), (val() if callable(val) else None)
    return (getattr(datamodule, _LOADER[stage])(),)

