"""`BaseFinetuning` and `BackboneFinetuning`: freeze part of a model, then unfreeze it later in
its own optimizer parameter group (Lightning's callbacks of the same names and behaviour)."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["BaseFinetuning", "BackboneFinetuning", "multiplicative"]

log = logging.getLogger("trainer.callbacks")

Modules = nn.Module | Iterable[Any]


def multiplicative(epoch: int) -> float:
    """BackboneFinetuning's default schedule: the backbone's learning rate doubles every epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Subclass it: `freeze_before_training(module)` runs in `setup`; `finetune_function(module,
    epoch, optimizer)` runs at every epoch start for each optimizer, and typically calls
    `unfreeze_and_add_param_group`. The parameter groups it adds are kept in checkpoints
    (by parameter name) and rebuilt on resume.

    Example:
        >>> class Unfreeze(BaseFinetuning):
        ...     def freeze_before_training(self, module):
        ...         self.freeze(module.encoder)
        ...     def finetune_function(self, module, epoch, optimizer):
        ...         if epoch == 2:
        ...             self.unfreeze_and_add_param_group(module.encoder, optimizer)
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        self._trainer: Callable[[], Any] = lambda: None

    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restarting = True
        self._internal_optimizer_metadata = dict(state.get("internal_optimizer_metadata", state))
        trainer = self._trainer()
        if trainer is not None and trainer.optimizers:  # the optimizers exist: rebuild their groups now
            self._rebuild_groups(trainer, trainer.lightning_module)

    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        self._trainer = weakref.ref(trainer)
        self.freeze_before_training(module)

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self._restarting:
            self._rebuild_groups(trainer, module)

    def _rebuild_groups(self, trainer: Trainer, module: Any) -> None:
        named = dict(module.named_parameters())
        for index, optimizer in enumerate(trainer.optimizers):
            groups = self._internal_optimizer_metadata.get(index)
            if groups:
                optimizer.param_groups = _with_params(groups, named)
                # the groups were unfrozen to be trained: train them again, as the run never cut did
                for group in optimizer.param_groups:
                    for parameter in group["params"]:
                        parameter.requires_grad_(True)
        self._restarting = False

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        for index, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(module, trainer.current_epoch, optimizer)
            self._store(module, index, before, optimizer.param_groups)

    def _store(self, pl_module: Any, opt_idx: int, num_param_groups: int, current_param_groups: list[dict[str, Any]]) -> None:
        """Record optimizer `opt_idx`'s groups (by parameter name) for checkpoints: all of them
        the first time, then those past the first `num_param_groups`. Lightning's name and
        arguments: a subclass that unfreezes outside an epoch start (from a batch hook, at a
        step) calls it itself."""
        names = {p: n for n, p in pl_module.named_parameters()}
        if opt_idx not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[opt_idx] = _with_params(current_param_groups, names)
        elif len(current_param_groups) != num_param_groups:
            self._internal_optimizer_metadata[opt_idx].extend(_with_params(current_param_groups[num_param_groups:], names))

    @staticmethod
    def _apply_mapping_to_param_groups(param_groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
        """`param_groups` with each parameter mapped through `mapping` (Lightning's helper)."""
        return _with_params(param_groups, mapping)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze (and add to `optimizer`) what this epoch trains; override it."""
        raise NotImplementedError(f"{type(self).__name__} must define finetune_function(pl_module, epoch, optimizer).")

    def freeze_before_training(self, pl_module: Any) -> None:
        """Freeze what training starts without; override it."""
        raise NotImplementedError(f"{type(self).__name__} must define freeze_before_training(pl_module).")

    # ------------------------------------------------------------- helpers (static, as Lightning's)
    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf modules (and modules holding parameters of their own) of `modules`."""
        if isinstance(modules, nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):  # a list of modules, nn.Sequential, nn.ModuleList: each item
            found = [m for item in modules for m in BaseFinetuning.flatten_modules(item)]
        else:
            found = list(modules.modules())
        return [m for m in found if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[nn.Parameter]:
        """The parameters of `modules` whose `requires_grad` is `requires_grad` (BatchNorm's
        skipped unless `train_bn`)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            yield from (p for p in module.parameters(recurse=False) if p.requires_grad == requires_grad)

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze every parameter of `modules` (BatchNorm layers track statistics again)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for parameter in module.parameters(recurse=False):
                parameter.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freeze one module's own parameters (a BatchNorm stops tracking statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for parameter in module.parameters(recurse=False):
            parameter.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze `modules`; with `train_bn` their BatchNorm layers stay trainable."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """`params` without those `optimizer` already holds (a warning names the mistake)."""
        held = [p for group in optimizer.param_groups for p in group["params"]]
        kept: list[nn.Parameter] = []
        dropped: list[nn.Parameter] = []
        for param in params:
            (dropped if any(torch.equal(p, param) for p in held) else kept).append(param)
        if dropped:
            log.warning("Some parameters to unfreeze are already in this optimizer and are skipped. Build the "
                        "optimizer from the trainable parameters only: %s(filter(lambda p: p.requires_grad, "
                        "self.parameters()), ...).", type(optimizer).__name__)
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(modules: Modules, optimizer: torch.optim.Optimizer, lr: float | None = None,
                                     initial_denom_lr: float = 10.0, train_bn: bool = True) -> None:
        """Unfreeze `modules` and add their parameters to `optimizer` as a new group, at `lr`
        (default: the first group's learning rate divided by `initial_denom_lr`)."""
        BaseFinetuning.make_trainable(modules)
        rate = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_on_optimizer(optimizer, BaseFinetuning.filter_params(modules, train_bn, True))
        if params:
            optimizer.add_param_group({"params": params, "lr": rate})


def _with_params(groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
    """Parameter groups with each parameter mapped (to its name for a checkpoint, and back)."""
    return [{**{k: v for k, v in group.items() if k != "params"}, "params": [mapping[p] for p in group["params"]]}
            for group in groups]


class BackboneFinetuning(BaseFinetuning):
    """Trains with `module.backbone` frozen until epoch `unfreeze_backbone_at_epoch`, then adds
    it to the optimizer at `backbone_initial_lr` (default: the current learning rate times
    `backbone_initial_ratio_lr`) and multiplies its learning rate by `lambda_func(epoch + 1)`
    every later epoch, never above the other groups' with `should_align`.

    Example:
        >>> BackboneFinetuning(unfreeze_backbone_at_epoch=5).unfreeze_backbone_at_epoch
        5
    """

    def __init__(self, unfreeze_backbone_at_epoch: int = 10, lambda_func: Callable[[int], float] = multiplicative,
                 backbone_initial_ratio_lr: float = 10e-2, backbone_initial_lr: float | None = None,
                 should_align: bool = True, initial_denom_lr: float = 10.0, train_bn: bool = True,
                 verbose: bool = False, rounding: int = 12) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.previous_backbone_lr = state["previous_backbone_lr"]
        super().load_state_dict(state)

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if not isinstance(getattr(module, "backbone", None), nn.Module):
            raise ValueError(f"BackboneFinetuning needs a `backbone` attribute (an nn.Module) on {type(module).__name__}.")
        super().on_fit_start(trainer, module)

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        current = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone = self.backbone_initial_lr if self.backbone_initial_lr is not None else current * self.backbone_initial_ratio_lr
            self.previous_backbone_lr = backbone
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, backbone, train_bn=self.train_bn,
                                              initial_denom_lr=self.initial_denom_lr)
        elif epoch > self.unfreeze_backbone_at_epoch:
            assert self.previous_backbone_lr is not None
            backbone = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone > current:
                backbone = current
            optimizer.param_groups[-1]["lr"] = backbone
            self.previous_backbone_lr = backbone
        else:
            return
        if self.verbose:
            log.info("Current lr: %s, Backbone lr: %s", round(current, self.rounding), round(backbone, self.rounding))
