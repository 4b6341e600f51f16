"""`Module`: the user's model and the hooks the Trainer calls on it.

`Module` never imports the Trainer: once attached it holds the Trainer (`self.trainer`) and
the Trainer's run (the `TrainerLink` protocol, `link.py`), both weakly: `self.log` writes into the
run's metrics, `self.optimizers()` and `self.manual_backward` reach its optimizers (`optimization.py`).
Its layers: `hooks.py` (the hooks), `tools.py` (Lightning's tools), `link.py`, `optimization.py`,
then `Module` here (hyperparameters, the device, the steps, `self.log`).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainer._hparams import AttributeDict, _Captured, _capturing_init
from trainer._hparams import save_hyperparameters as save_hparams
from trainer.module.link import TrainerLink
from trainer.module.optimization import ModuleOptimization

__all__ = ["Module", "Reduce", "AttributeDict"]

Reduce = Literal["mean", "sum", "max", "min"]


class Module(ModuleOptimization):
    """A `torch.nn.Module` with the hooks a Trainer drives.

    Subclass it, implement `training_step` and `configure_optimizers`, then hand it to
    `Trainer.fit`. The arguments your `__init__` was called with (defaults filled in)
    are recorded in `self.hparams` and logged once per run; assign `self.hparams` in
    `__init__` to choose them yourself (`{}` for none). A pickled or deep-copied Module
    leaves its Trainer behind.

    Example:
        >>> import torch
        >>> from trainer import Module
        >>> class Regressor(Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(3, 1)
        ...     def forward(self, x):
        ...         return self.net(x)
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         loss = torch.nn.functional.mse_loss(self(x), y)
        ...         self.log("train/loss", loss)
        ...         return loss
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.1)
        >>> Regressor()(torch.ones(2, 3)).shape
        torch.Size([2, 1])
    """

    if TYPE_CHECKING:
        hparams: dict[str, Any]
    _saves_hyperparameters = True  # a frame of its __init__ is part of save_hyperparameters' chain

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap a subclass's own `__init__` so its arguments land in `self.hparams`."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_captures_hparams", False):
            cls.__init__ = _capturing_init(init)  # type: ignore[method-assign]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Set through object.__setattr__ so nn.Module does not register the Trainer.
        object.__setattr__(self, "_trainer_ref", None)
        object.__setattr__(self, "_run_ref", None)
        if "hparams" not in self.__dict__:
            object.__setattr__(self, "hparams", _Captured())  # filled with the subclass's init arguments

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "hparams" and isinstance(value, dict) and not isinstance(value, AttributeDict):
            value = AttributeDict(value)  # `self.hparams.lr` as well as `self.hparams["lr"]`
        super().__setattr__(name, value)

    @property
    def device(self) -> torch.device:
        """The device of the module's parameters (or buffers); cpu when it has none (Lightning's).
        Parameters offloaded to the CPU between uses (FSDP's cpu_offload) report the device
        the module computes on."""
        chosen = self.__dict__.get("_device_set") or self.__dict__.get("_compute_device")
        if chosen is not None:
            return chosen  # type: ignore[no-any-return]
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            return tensor.device
        return torch.device("cpu")

    @device.setter
    def device(self, value: Any) -> None:  # plain-PyTorch code that assigns self.device keeps working
        object.__setattr__(self, "_device_set", torch.device(value))

    def save_hyperparameters(self, *names: Any, ignore: str | list[str] | None = None, frame: Any = None,
                             logger: bool = True) -> None:
        """Record `__init__` arguments in `self.hparams` now (Lightning's rules).

        The arguments are those of the whole chain of `__init__` calls that builds this module (a
        child's `super().__init__(...)` included, the outermost call's values winning); `names`
        picks some (default: all), or is one dict or `argparse.Namespace` whose items become the
        hyperparameters; `ignore` drops some, also ones an earlier call saved. A second call adds
        to what the first saved. Without any call the outermost `__init__`'s arguments are
        captured automatically. `frame` (Lightning's) starts from another frame; `logger=False`
        is accepted (the hyperparameters are still written once per run).
        """
        current = inspect.currentframe()
        caller = frame if frame is not None else current.f_back if current is not None else None
        if caller is not None:
            save_hparams(self, caller, names, ignore)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and `copy.deepcopy` without the Trainer (a copy starts detached)."""
        state = super().__getstate__()
        state["_trainer_ref"] = state["_run_ref"] = None
        state.pop("_owned_trainer", None)  # a Trainer the module built itself stays with the original
        return state

    @property
    def on_gpu(self) -> bool:
        """Whether the module's parameters are on a CUDA device."""
        return self.device.type == "cuda"

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: Any, map_location: Any = None, hparams_file: Any = None, strict: bool = True,
        **overrides: Any,
    ) -> Any:
        """A new module rebuilt from a checkpoint of this trainer (or of Lightning 2.x): `cls(**hparams)`
        with the saved hyperparameters, `overrides` winning, then `on_load_checkpoint` and the weights.
        `hparams_file` (a logger's `hparams.yaml`, Lightning's or ours) replaces the saved
        hyperparameters, as in Lightning.

        Only plain data is read (nothing in the file is executed). An argument that is not plain
        data (a module, a class, a function) is saved as its text: when that text is `__init__`'s
        default's, the default is used; otherwise pass it again as an override. The module
        is on the device the weights were loaded to (`map_location`, default: where they were saved,
        or the CPU when that device is missing).
        """
        from trainer.module.load import load_module

        return load_module(cls, checkpoint_path, map_location, strict, overrides, hparams_file)

    # ------------------------------------------------------------------ the user's steps
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Return a scalar loss tensor, a dict with a scalar ``"loss"``, or None to skip."""
        raise NotImplementedError(
            f"{type(self).__name__} has no training_step. Expected a method "
            "`training_step(self, batch, batch_idx)` returning the loss to minimise."
        )

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Optional: log validation metrics with `self.log`."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Optional: log test metrics with `self.log`."""

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        """Return one prediction; the default calls the module on the batch."""
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer, `(optimizer, scheduler)`, or a dict with both."""
        raise NotImplementedError(
            f"{type(self).__name__} has no configure_optimizers. Expected it to return an "
            "optimizer, a tuple (optimizer, scheduler) or a dict "
            "{'optimizer': ..., 'lr_scheduler': ...}."
        )

    # ------------------------------------------------------------------------- logging
    def log(
        self,
        name: str,
        value: torch.Tensor | float | int | Any,
        *,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        prog_bar: bool = False,
        reduce: Reduce = "mean",
        batch_size: int | None = None,
        logger: bool = True,
        reduce_fx: Any = None,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        rank_zero_only: bool = False,
        enable_graph: bool = False,
        metric_attribute: str | None = None,
    ) -> None:
        """Record a metric.

        In `training_step` the default is per step (written every `log_every_n_steps`;
        the micro-batches of one optimizer step are combined with `reduce`); in
        `validation_step`/`test_step` it is per epoch, reduced with `reduce` (a mean
        weighted by `batch_size`, which defaults to the batch's size). Tensors stay on their
        device until written.

        Args:
            name: the tag, e.g. ``"val/acc"``.
            value: a scalar tensor or number, or a torchmetrics `Metric` (per step its last
                forward's value, per epoch its `compute()`, then `reset()`; docs/logging.md).
            on_step: keep the latest per-step value.
            on_epoch: also reduce over the epoch.
            prog_bar: show it in the progress bar.
            reduce: how epoch values combine: "mean", "sum", "max" or "min".
            batch_size: weight of this value in an epoch mean (default: the batch's size).
            logger: False keeps it out of the logger (it is still in `callback_metrics`).
            reduce_fx: Lightning's name for `reduce`; also `torch.mean`/`sum`/`max`/`min`.
            sync_dist: accepted for Lightning code: epoch values are always reduced across
                ranks under DDP (weighted), per-step values are each rank's own.
            sync_dist_group, add_dataloader_idx, rank_zero_only, enable_graph, metric_attribute:
                Lightning's, accepted so its code runs: epoch values reduce over every rank
                (there is no sub-group), a value logged on rank 0 only is kept there, values are kept detached,
                and a metric object is found by identity (no attribute name needed).

        With both `on_step` and `on_epoch` the values are written as `<name>_step` and
        `<name>_epoch`, and `callback_metrics[name]` holds the latest (Lightning's rule).
        With several evaluation loaders a value logged while loader N runs is kept as
        `<name>/dataloader_idx_N` (Lightning's), unless `add_dataloader_idx=False`.
        """
        run = self._running()
        if run is None:
            return  # called outside a Trainer (e.g. a unit test of the step): nothing to do
        if reduce_fx is not None:
            reduce = _reduce_name(name, reduce_fx)
        if add_dataloader_idx and isinstance(name, str) and "/dataloader_idx_" in name:
            raise ValueError(
                f"self.log({name!r}, ...) expected a name without '/dataloader_idx_': with several evaluation "
                "loaders the Trainer adds it itself. Drop it from the name, or pass add_dataloader_idx=False."
            )
        run.log_metric(
            name,
            value,
            on_step=on_step,
            on_epoch=on_epoch,
            prog_bar=prog_bar,
            reduce=reduce,
            batch_size=batch_size,
            logger=logger,
            add_dataloader_idx=add_dataloader_idx,
        )

    def log_dict(self, dictionary: Mapping[str, Any], **options: Any) -> None:
        """`self.log(name, value, **options)` for every item (Lightning's `log_dict`); a
        torchmetrics `MetricCollection` logs each of its metrics."""
        grouped = getattr(dictionary, "_enable_compute_groups", False)  # a MetricCollection sharing states
        items = dictionary.items(keep_base=False, copy_state=False) if grouped else dictionary.items()  # type: ignore[call-arg]
        for name, value in items:
            self.log(name, value, **options)


def _reduce_name(name: str, reduce_fx: Any) -> Reduce:
    """Lightning's `reduce_fx` ("mean", torch.mean, ...) as one of our reduction names."""
    if isinstance(reduce_fx, str):
        spelled = "mean" if reduce_fx.lower() == "avg" else reduce_fx.lower()  # Lightning lower-cases, "avg" = mean
        if spelled in ("mean", "sum", "max", "min"):
            return spelled  # type: ignore[return-value]
    builtins = {"sum": sum, "max": max, "min": min}  # Lightning accepts Python's too
    for known in ("mean", "sum", "max", "min"):
        if reduce_fx is getattr(torch, known, None) or reduce_fx is builtins.get(known):
            return known  # type: ignore[return-value]
    raise ValueError(
        f"self.log({name!r}, ..., reduce_fx=...) expected 'mean', 'sum', 'max', 'min' or torch.mean/sum/max/min. "
        f"Received: {reduce_fx!r}."
    )


def own_hook(module: Any, name: str) -> Any:
    """`module.<name>` when the module has its own (a method of its class, or one set on the
    instance), else None: `model.validation_step = None` switches a stage off (Lightning's
    `is_overridden`). Looked up once per run, so a hook nobody overrides costs nothing per step."""
    own = getattr(module, name, None)
    if own is None or getattr(own, "__func__", own) is getattr(Module, name, None):
        return None
    return own
