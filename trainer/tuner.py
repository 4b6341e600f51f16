"""The learning-rate finder: `lr_find(trainer, model, loader)` and Lightning's `Tuner(trainer).lr_find`.

A short training run raises the learning rate step by step from `min_lr` to `max_lr`
(exponentially by default) and records the loss of every optimizer step, smoothed as
Lightning smooths it (a running average with `beta=0.98`, bias-corrected); it stops early
once the smoothed loss exceeds `early_stop_threshold` times the best one. The suggestion is
the learning rate where the smoothed loss falls fastest: its most negative slope against
log(lr) (against lr for `mode="linear"`), skipping the first 10 and the last point. Lightning
takes the slope against lr itself for an exponential sweep too, which favours the smallest
learning rates, where the sweep's steps are tiny and noise makes steep slopes.

The run uses a separate Trainer with this one's settings (precision, device, accumulation,
limits on batches), a fresh optimizer from `configure_optimizers`, no logger, checkpoint,
validation or bar, none of the module's `configure_callbacks()`, and a temporary run folder
(deleted afterwards), so nothing of it is found by a later run. Afterwards everything is as
it was: the module's weights, buffers, gradients and train/eval modes, this Trainer and its
optimizers, every global random stream, the state of every generator a loader it trained on
draws from (a datamodule's own, its sampler's, its batch sampler's) and its persistent workers
(the sweep's are shut down; the next `iter()` starts fresh ones).

Example:
    >>> from trainer.tuner import LRFinderResult
    >>> result = LRFinderResult([1e-3, 1e-2, 1e-1, 1.0], [1.0, 0.9, 0.5, 3.0])
    >>> result.suggestion(skip_begin=0, skip_end=1)
    0.1
"""

from __future__ import annotations

import copy
import logging
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer._utils import rng_state, set_rng_state
from trainer.loops.hooks import HOOKS, CallbackBase

if TYPE_CHECKING:
    from trainer.trainer import Trainer

__all__ = ["LRFinderResult", "TUNED_HPARAMS", "Tuner", "apply_lr", "lr_find"]

#: The module attribute holding the hyperparameters a sweep set, with the values they had before.
TUNED_HPARAMS = "_tuned_hparams"

log = logging.getLogger("trainer")


class LRFinderResult:
    """What `lr_find` measured: `results = {"lr": [...], "loss": [...]}` (smoothed losses; one
    entry per optimizer step), `suggestion()`, `plot()` and `save_plot()`."""

    def __init__(self, lrs: list[float], losses: list[float], *, mode: str = "exponential",
                 run_dir: Any = None) -> None:
        self.results: dict[str, list[float]] = {"lr": list(lrs), "loss": list(losses)}
        self.mode = mode
        self._run_dir = run_dir  # a callable giving the Trainer's run folder, for save_plot
        self._optimal_idx: int | None = None
        self.applied_lr: float | None = None  # the suggestion lr_find(update_attr=True) set on the module

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate of the steepest descent of the smoothed loss (None: too few finite
        points). `skip_begin`/`skip_end` points are left out at either end (Lightning's defaults)."""
        lrs, losses = self.results["lr"], self.results["loss"]
        end = len(losses) - skip_end if skip_end else len(losses)
        index = [i for i in range(skip_begin, end) if math.isfinite(losses[i])]
        if len(index) < 2:
            log.warning("lr_find: %d finite loss(es) after skipping, too few to suggest a learning rate. Expected "
                        "a longer sweep (num_training) or smaller skip_begin/skip_end.", len(index))
            self._optimal_idx = None
            return None
        # the slope against log(lr) for an exponential sweep (equal steps), against lr for a linear one
        where = [math.log(lrs[i]) if self.mode == "exponential" else lrs[i] for i in index]
        slope = torch.gradient(torch.tensor([losses[i] for i in index], dtype=torch.float64),
                               spacing=[torch.tensor(where, dtype=torch.float64)])[0]
        self._optimal_idx = index[int(torch.argmin(slope))]
        return lrs[self._optimal_idx]

    def plot(self, suggest: bool = True, show: bool = False, ax: Any = None) -> Any:
        """The loss against the learning rate (log scale for an exponential sweep), with the
        suggestion marked; returns the matplotlib figure (matplotlib: the `examples` extra)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError(
                "LRFinderResult.plot() draws with matplotlib, which is not installed. Expected "
                "`pip install matplotlib` (or the examples extra); results['lr'] and results['loss'] hold the numbers."
            ) from error
        if ax is None:
            fig, ax = plt.subplots()
        else:
            fig = ax.figure
        ax.plot(self.results["lr"], self.results["loss"])
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss (smoothed)")
        if suggest:
            lr = self.suggestion()
            if lr is not None and self._optimal_idx is not None:
                ax.plot(lr, self.results["loss"][self._optimal_idx], marker="o", markersize=10, color="red",
                        label=f"suggestion {lr:.3g}")
                ax.legend()
        if show:
            plt.show()
        return fig

    def save_plot(self, path: str | Path | None = None) -> Path:
        """Write the plot as an image (default: `lr_find.png` in the Trainer's run folder)."""
        if path is None:
            if self._run_dir is None:
                raise ValueError("save_plot() expected a path: this result has no Trainer run folder.")
            path = Path(self._run_dir()) / "lr_find.png"
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fig = self.plot()
        fig.savefig(target)
        import matplotlib.pyplot as plt

        plt.close(fig)
        return target


class _Hooks(CallbackBase):
    """Every hook, doing nothing (as `trainer.Callback`'s, which this module may not import: the
    Trainer imports it); the dispatcher calls only the ones a subclass overrides."""


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


for _hook in HOOKS:
    setattr(_Hooks, _hook, _nothing)


class _Sweep(_Hooks):
    """Sets each step's learning rate and records the step's smoothed loss."""

    def __init__(self, schedule: list[float], early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.schedule, self.threshold, self.beta = schedule, early_stop_threshold, beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self._average, self._best = 0.0, math.inf
        self._recorded = 0
        self.workers = _PersistentWorkers()

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        self.workers.put_aside(trainer.train_dataloader)

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        self.workers.put_aside(trainer.train_dataloader)  # a loader reloaded for this epoch

    def on_before_optimizer_step(self, trainer: Trainer, module: Any, optimizer: Any) -> None:
        lr = self.schedule[min(trainer.global_step, len(self.schedule) - 1)]
        for opt in trainer.optimizers:
            for group in opt.param_groups:
                group["lr"] = torch.tensor(lr) if isinstance(group["lr"], torch.Tensor) else lr

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step <= self._recorded:
            return  # inside an accumulation window
        self._recorded = step
        self.lrs.append(self.schedule[step - 1])
        loss = trainer._run.output.train_loss
        loss = loss if loss is not None else math.nan
        if not math.isfinite(loss):
            self.losses.append(math.nan)
            trainer.should_stop = True  # diverged: nothing after this says more
            return
        self._average = self.beta * self._average + (1 - self.beta) * loss
        smoothed = self._average / (1 - self.beta ** step)
        self.losses.append(smoothed)
        if self.threshold is not None and step > 1 and smoothed > self.threshold * self._best:
            trainer.should_stop = True
        self._best = min(self._best, smoothed)


def lr_find(trainer: Trainer, model: Any, train_dataloaders: Any = None, *, datamodule: Any = None, min_lr: float = 1e-8,
            max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
            early_stop_threshold: float | None = 4.0, update_attr: bool = False, attr_name: str = "") -> LRFinderResult:
    """The sweep (see the module's docstring); `trainer` is left as it was."""
    if mode not in ("exponential", "linear"):
        raise ValueError(f"lr_find(mode=...) expected 'exponential' or 'linear'. Received: {mode!r}.")
    if not (0 < min_lr < max_lr) or not isinstance(num_training, int) or num_training < 2:
        raise ValueError(
            f"lr_find expected 0 < min_lr < max_lr and num_training >= 2. Received: min_lr={min_lr!r}, "
            f"max_lr={max_lr!r}, num_training={num_training!r}."
        )
    if trainer.strategy.world_size > 1:
        raise ValueError("lr_find runs in one process. Expected a run without DDP/FSDP: find the learning rate "
                         "first, then launch the distributed run with it.")
    if update_attr:
        attr_name = _lr_attribute(model, attr_name)
    fraction = [i / (num_training - 1) for i in range(num_training)]
    schedule = ([min_lr * (max_lr / min_lr) ** f for f in fraction] if mode == "exponential"
                else [min_lr + (max_lr - min_lr) * f for f in fraction])
    sweep = _Sweep(schedule, early_stop_threshold)
    saved = _Saved(model, train_dataloaders)
    # its own run folder, deleted afterwards: whatever the module's hooks write there (trainer.log_dir)
    # never lands in the user's run folders, where a later `ckpt_path="last"` would find it
    with tempfile.TemporaryDirectory(prefix="lr_find-") as scratch:
        try:
            finder = type(trainer)(**_sweep_arguments(trainer, num_training, sweep, scratch))
            finder._run.sweep = True  # no configure_callbacks(), no iterator opened ahead (loops/context.py)
            finder.fit(model, train_dataloaders, datamodule=datamodule)
        finally:
            sweep.workers.restore()
            saved.restore()
    if len(sweep.losses) < num_training:
        log.info("lr_find stopped after %d of %d steps: the loss diverged.", len(sweep.losses), num_training)
    result = LRFinderResult(sweep.lrs, sweep.losses, mode=mode, run_dir=lambda: trainer.log_dir)
    if update_attr:
        lr = result.suggestion()
        if lr is not None:
            _set_lr(model, attr_name, lr)
            result.applied_lr = lr
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = lr
            log.info("Learning rate set to %g (%s).", lr, attr_name)
    return result


def _sweep_arguments(trainer: Trainer, num_training: int, sweep: _Sweep, root_dir: str) -> dict[str, Any]:
    # nonfinite_loss="off": a diverged step is written like any other (its nan ends the sweep;
    # the weights it spoils are restored afterwards)
    args = trainer.args.model_dump(exclude={"callbacks", "logger", "precision", "strategy"})
    precision = trainer.args.precision
    args.update(
        precision=copy.deepcopy(precision) if not isinstance(precision, str) else precision,  # its own GradScaler
        strategy=trainer.args.strategy, callbacks=[sweep], logger=False, root_dir=root_dir, max_steps=num_training,
        max_epochs=None,
        min_epochs=None, min_steps=None, max_time=None, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=1, num_sanity_val_steps=0, limit_val_batches=0,
        nonfinite_loss="off", fast_dev_run=False, profiler=None, requeue=False, run_name=None,
        async_checkpointing=False, performance_metrics=False, seed=None,
    )
    return {k: v for k, v in args.items() if k in type(trainer.args).model_fields}


class _PersistentWorkers:
    """A loader with `persistent_workers=True` keeps its worker iterator, and the base seed that
    iterator drew, for the next `iter()`: the sweep trains on an iterator of its own, shut down
    afterwards, so the next fit opens the loader exactly as it would have without the sweep."""

    def __init__(self) -> None:
        self._kept: list[tuple[Any, Any]] = []  # (loader, the iterator it held before the sweep)
        self._generators: list[tuple[torch.Generator, torch.Tensor]] = []  # (generator, its state before the sweep)

    def put_aside(self, loader: Any) -> None:
        if getattr(loader, "combines_loaders", False):  # a CombinedLoader or Mixture: each of its loaders
            for child in loader.flattened:
                self.put_aside(child)
        # a loader first seen here (a datamodule's) has not been iterated yet: its generators
        # (often the datamodule's own, shared by every loader it makes) are as the sweep found them
        for generator in _loader_generators(loader):
            if all(seen is not generator for seen, _ in self._generators):
                self._generators.append((generator, generator.get_state()))
        if not hasattr(loader, "_iterator") or any(seen is loader for seen, _ in self._kept):
            return
        self._kept.append((loader, loader._iterator))
        loader._iterator = None

    def restore(self) -> None:
        for loader, before in self._kept:
            mine = loader._iterator
            if mine is not None and mine is not before and callable(getattr(mine, "_shutdown_workers", None)):
                mine._shutdown_workers()
            loader._iterator = before
        self._kept.clear()
        for generator, state in self._generators:
            generator.set_state(state)
        self._generators.clear()


def _loader_generators(loader: Any) -> list[torch.Generator]:
    """The generators a loader draws its order and base seed from: its own, its sampler's and its
    batch sampler's (or that one's sampler's); a CombinedLoader's: each of its loaders' (a Mixture's own too)."""
    if getattr(loader, "combines_loaders", False) or isinstance(loader, (dict, list, tuple)):
        parts = loader.flattened if getattr(loader, "combines_loaders", False) else \
            list(loader.values()) if isinstance(loader, dict) else list(loader)
        children = [g for child in parts for g in _loader_generators(child)]
        own = getattr(loader, "generator", None)
        return children + ([own] if isinstance(own, torch.Generator) else [])
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    holders = [loader, sampler, batch_sampler, getattr(batch_sampler, "sampler", None)]
    found: list[torch.Generator] = []
    for holder in holders:
        generator = getattr(holder, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not seen for seen in found):
            found.append(generator)
    return found


class _Saved:
    """What the sweep changes, to put back: weights and buffers, gradients, train/eval modes,
    the Trainer link, every global random stream, the loader's own generators (its persistent
    workers: `_PersistentWorkers`)."""

    def __init__(self, model: torch.nn.Module, loader: Any) -> None:
        self.model = model
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in model.parameters()]
        self.modes = [(m, m.training) for m in model.modules()]
        self.device = next((p.device for p in model.parameters()), None)
        self.link = model.__dict__.get("_trainer_ref")
        self.rng = rng_state()
        self.generators = [(g, g.get_state()) for g in _loader_generators(loader)]

    def restore(self) -> None:
        model = self.model
        if self.device is not None and next(model.parameters()).device != self.device:  # the sweep moved it
            model.to(self.device)
        model.load_state_dict(self.state)
        for parameter, grad in self.grads:
            parameter.grad = grad
        for module, training in self.modes:
            module.training = training
        object.__setattr__(model, "_trainer_ref", self.link)
        set_rng_state(self.rng)
        for generator, state in self.generators:
            generator.set_state(state)


def apply_lr(model: Any, lr: float, attr_name: str = "") -> None:
    """Set `lr` on the module's learning-rate attribute as `lr_find(update_attr=True)` does (the
    optimizers are left alone): for a resumed run, whose optimizers hold the sweep's outcome."""
    _set_lr(model, _lr_attribute(model, attr_name), lr)


def _lr_attribute(model: Any, name: str) -> str:
    """Lightning's rule: `name`, else `lr` or `learning_rate` on the module or its hparams."""
    candidates = [name] if name else ["lr", "learning_rate"]
    hparams = getattr(model, "hparams", None) or {}
    for candidate in candidates:
        if hasattr(model, candidate) or candidate in hparams:
            return candidate
    raise AttributeError(
        f"lr_find(update_attr=True) found no learning rate attribute on {type(model).__name__}. Expected "
        f"{'`' + name + '`' if name else '`lr` or `learning_rate`'} on the module or in its hparams, or attr_name=."
    )


def _set_lr(model: Any, name: str, lr: float) -> None:
    if hasattr(model, name):
        setattr(model, name, lr)
    hparams = getattr(model, "hparams", None)
    if hparams is not None and name in hparams:
        # the value the module was built with, kept (and saved in checkpoints as `tuned_hparams`):
        # the run is still the same experiment for ckpt_path="last", whatever the sweep suggests
        vars(model).setdefault(TUNED_HPARAMS, {}).setdefault(name, hparams[name])
        hparams[name] = lr


class Tuner:
    """Lightning's `Tuner`: `Tuner(trainer).lr_find(model, train_dataloaders=...)`.

    As in Lightning, `update_attr=True` (the default here) sets the suggestion on the module's
    `lr`/`learning_rate` (or `attr_name`), so the next `configure_optimizers` uses it.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def lr_find(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None, dataloaders: Any = None,
                datamodule: Any = None, method: str = "fit", min_lr: float = 1e-8, max_lr: float = 1.0,
                num_training: int = 100, mode: str = "exponential", early_stop_threshold: float | None = 4.0,
                update_attr: bool = True, attr_name: str = "") -> LRFinderResult:
        if method != "fit":
            raise ValueError(f"Tuner.lr_find(method=...) expected 'fit'. Received: {method!r}.")
        return lr_find(self._trainer, model, train_dataloaders if train_dataloaders is not None else dataloaders,
                       datamodule=datamodule, min_lr=min_lr, max_lr=max_lr, num_training=num_training, mode=mode,
                       early_stop_threshold=early_stop_threshold, update_attr=update_attr, attr_name=attr_name)

    def scale_batch_size(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "Tuner.scale_batch_size is not provided: pick the batch size by hand (the largest that fits, then "
            "adjust accumulate_grad_batches for the effective batch size you want)."
        )
