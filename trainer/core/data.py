"""Where the Trainer's loaders come from, and what it does to them before a loop reads them.

The sources, in Lightning's order: loaders passed to `fit`/`validate`/..., a DataModule's
`*_dataloader()` methods, or the module's own (`train_dataloader()` and `val_dataloader()`
defined on the LightningModule). A module's methods are called after its `setup(stage)` hook,
so datasets built there exist. `reload_dataloaders_every_n_epochs` calls the source again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer._utils import rng_state, set_rng_state
from trainer.core.flags import overfit_loader
from trainer.loops.batches import check_loader, one_loader
from trainer.loops.combined import CombinedLoader, as_train_loader
from trainer.loops.loaders import EvalLoaders, no_loaders
from trainer.module import own_hook
from trainer.loops.worker_seeds import seed_workers

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.loops.context import RunContext
    from trainer.module import Module
    from trainer.strategies import Strategy

__all__ = ["TrainerData", "module_defines"]

log = logging.getLogger("trainer")

_STEP_OF = {"val_dataloader": "validation_step", "test_dataloader": "test_step", "predict_dataloader": "predict_step"}


def module_defines(model: Any, method: str) -> bool:
    """Whether the module has a `*_dataloader` method (LightningModule's data hooks)."""
    return callable(getattr(model, method, None))


def _val_loader_of(source: Any, isolated: bool = True) -> Any:
    """`val_dataloader()`, `isolated`: without touching the random streams. Lightning asks for
    it inside its sanity check, whose random state is restored afterwards, so a validation set
    drawn at random (the BoringModel's `RandomDataset`) leaves training's draws as they were;
    without a sanity check (`num_sanity_val_steps=0`) its draws stay, here as there."""
    if not isolated:
        return source()
    saved = rng_state()
    try:
        return source()
    finally:
        set_rng_state(saved)


class TrainerData:
    """Mixed into `Trainer`: choosing and preparing loaders."""

    args: TrainerArgs
    strategy: Strategy
    _run: RunContext
    _loader_source: Callable[..., Any] | None
    _warned_no_validation_step: bool

    def _loaders(self, stage: str, model: Module, datamodule: Any, *loaders: Any) -> tuple[Any, ...]:
        """Loaders given directly, or a DataModule's (Lightning's `fit(model, dm)` too), after
        `prepare_data`."""
        from trainer.datamodule import DataModule, is_datamodule, resolve_loaders

        if datamodule is None and loaders and is_datamodule(loaders[0]):
            datamodule, loaders = loaders[0], (None,) * len(loaders)
        self._run.datamodule = datamodule
        if isinstance(datamodule, DataModule) or hasattr(datamodule, "trainer"):
            try:
                datamodule.trainer = self  # Lightning's `self.trainer` inside a LightningDataModule
            except AttributeError:  # a read-only property of a duck-typed data object
                pass
        self._prepare_data(model, datamodule)
        # fit asks a DataModule for its loaders once its state is restored (a resume), as Lightning
        resolved = resolve_loaders(stage, datamodule, *loaders, call=stage != "fit")
        if stage == "fit":
            self._loader_source = None
            if datamodule is not None:
                val = getattr(datamodule, "val_dataloader", None)
                validates = self.args.limit_val_batches != 0 and callable(val)  # Lightning: not asked when 0

                def source(part: str, isolated: bool = True) -> Any:
                    if part == "train":
                        return datamodule.train_dataloader()
                    return _val_loader_of(val, isolated and self._sanity_checks()) if validates else None

                self._loader_source = source
        return resolved

    def _sanity_checks(self) -> bool:
        """Whether fit's sanity check runs (Lightning asks for the validation data inside it)."""
        return self.args.num_sanity_val_steps != 0

    def _prepare_data(self, model: Module, datamodule: Any) -> None:
        """Lightning's `prepare_data` (download, tokenize: work done once per machine), the
        DataModule's then the module's: on each machine's local rank 0 (global rank 0 with
        `prepare_data_per_node = False`) while the other ranks wait."""
        owners = [datamodule] if callable(getattr(datamodule, "prepare_data", None)) else []
        # the base class's no-op needs no wait on the other ranks
        if module_defines(model, "prepare_data") and own_hook(model, "prepare_data") is not None:
            owners.append(model)
        for owner in owners:
            per_node = getattr(owner, "prepare_data_per_node", True)
            rank = (getattr(self.strategy, "local_rank", 0) or 0) if per_node else self.strategy.rank
            if rank == 0:
                owner.prepare_data()
        if owners and self.strategy.world_size > 1:
            self.strategy.barrier()

    def _fit_loader_sources(self, model: Module, train: Any, val: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
        """After `setup("fit")`: how to get the training and the validation loader, the module's
        own where none were given (Lightning's data hooks); the caller asks in Lightning's order."""
        def given(loader: Any) -> Callable[[], Any]:
            return lambda: loader

        if self._run.datamodule is not None:
            if train is None and self._loader_source is not None:
                source = self._loader_source
                return (lambda: source("train")), (lambda: source("val"))
            return given(train), given(val)
        from_module_train = train is None and module_defines(model, "train_dataloader")
        # Lightning does not ask for validation data it will not use (limit_val_batches=0)
        from_module_val = val is None and module_defines(model, "val_dataloader") and self.args.limit_val_batches != 0
        if from_module_train:
            def source(part: str, isolated: bool = True) -> Any:
                if part == "train":
                    return getattr(model, "train_dataloader")()
                val = getattr(model, "val_dataloader", None)
                wanted = callable(val) and self.args.limit_val_batches != 0
                return _val_loader_of(val, isolated and self._sanity_checks()) if wanted else None

            self._loader_source = source
        train_of = getattr(model, "train_dataloader") if from_module_train else given(train)
        val_of = (lambda: _val_loader_of(getattr(model, "val_dataloader"), self._sanity_checks())) if from_module_val else given(val)
        return train_of, val_of

    def _fit_loaders_in_order(self, model: Module, train: Any, val: Any, *, opens: bool,
                              defer_opening: bool) -> tuple[Any, Any, bool]:
        """fit's loaders in Lightning's order: `val_dataloader()` first when a sanity check runs
        (inside its restored random state), then the training loader, prepared, and (`opens`) its
        first epoch's iterator, then `val_dataloader()` without a sanity check. With a sanity
        check and `defer_opening` the iterator is opened after it, as Lightning's data setup
        runs after its sanity check (the third value says it is owed); asked for earlier
        (`estimated_stepping_batches` in configure_optimizers), it is opened at once, as there."""
        train_of, val_of = self._fit_loader_sources(model, train, val)
        sanity = self._sanity_checks()
        first_val = val_of() if sanity else None
        loader = as_train_loader(train_of())
        check_loader(loader, "train_loader")
        loader = self._prepare_loader(loader, train=True)
        owed = opens and sanity and defer_opening
        if opens and not owed:
            self.strategy.set_epoch(loader, self._run.state.epoch)  # a sampler iter() reads at once sees its epoch
            self._run.data_order.open_ahead(loader, self._run.state.epoch)
        return loader, (first_val if sanity else val_of()), owed

    def _checked_val(self, model: Module, val: Any) -> Any:
        """The validation loader fit runs, or None: a module without `validation_step` skips
        validation, with a warning (once per Trainer), as Lightning does; so does an empty list
        or dict of loaders (silently, as Lightning)."""
        if val is None or no_loaders(one_loader(val)):  # an empty list or dict: no validation, as Lightning
            return None
        if own_hook(model, "validation_step") is None:
            if not self._warned_no_validation_step:
                self._warned_no_validation_step = True
                log.warning("You passed a validation loader, but %s has no validation_step: validation is skipped. "
                            "Define validation_step(self, batch, batch_idx) to run it.", type(model).__name__)
            return None
        val = one_loader(val)  # Lightning's [loader]
        check_loader(val, "val_loader")
        return val

    def _prepare_loader(self, loader: Any, *, train: bool, fitting: bool = True) -> Any:
        """`overfit_batches` (fit only: unshuffled), then the strategy's DistributedSampler
        unless `use_distributed_sampler=False`; several evaluation loaders: each of them."""
        if isinstance(loader, EvalLoaders):
            return loader.map(lambda one: self._prepare_loader(one, train=train, fitting=fitting))
        if isinstance(loader, CombinedLoader):  # each of its loaders, in place (as Lightning's)
            loader.flattened = [self._prepare_loader(one, train=train, fitting=fitting) for one in loader.flattened]
            return loader
        if fitting and self.args.overfit_batches:
            loader = overfit_loader(loader, "train" if train else "val")
        if self.args.use_distributed_sampler:
            loader = self.strategy.setup_loader(loader, train=train)
        seed_workers(loader, self.strategy.global_rank)  # seed_everything(workers=True): Lightning's worker seeds
        return loader

    def _reload_loaders(self, model: Module, part: str) -> tuple[Any] | None:
        """`reload_dataloaders_every_n_epochs`: the source's train (`part="train"`) or val loader
        again, prepared, as a 1-tuple (the val loader may be None: no validation); None when the
        loaders were passed to fit directly (they are the same objects). A val loader asked for
        while fit runs draws from the random streams, as Lightning's reload inside its validation."""
        if self._loader_source is None:
            return None
        if part == "train":
            train = as_train_loader(self._loader_source("train"))
            check_loader(train, "train_loader")
            return (self._prepare_loader(train, train=True),)
        val = self._checked_val(model, self._loader_source("val", False))
        return (None if val is None else self._prepare_loader(val, train=False),)

    def _evaluation_loader(self, model: Module, stage: str, loader: Any, *, call: bool = True) -> Any:
        """After `setup(stage)`: the module's own `<stage>_dataloader()` where none was given
        (`call=False`: only check, before any work, that there will be a loader)."""
        method = {"validation": "val_dataloader", "test": "test_dataloader", "predict": "predict_dataloader"}[stage]
        if loader is None and self._run.datamodule is None and module_defines(model, method):
            if not call:
                return None
            loader = getattr(model, method)()
        verb = "validate" if stage == "validation" else stage
        if loader is None:
            raise ValueError(
                f"{verb}() expected a loader (Lightning: dataloaders=), datamodule=, or a {method}() method on "
                f"{type(model).__name__}. Received: none of them."
            )
        loader = one_loader(loader)  # Lightning's [loader]
        check_loader(loader, "loader")
        return loader
