"""The evaluation loop shared by validation (inside fit), `validate`, `test` and `predict`."""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainer.logging.metrics import to_floats
from trainer._utils import length_of, move_to_device, to_host
from trainer.loops.batches import batch_mover
from trainer.module import own_hook
from trainer.loops.combined import CombinedLoader, batches_of
from trainer.loops.context import RunContext, module_of
from trainer.loops.loaders import EvalLoaders, loader_list, no_loaders

__all__ = ["EvalLoop", "check_dataloader_idx", "per_loader", "takes_names"]

_STEP = {"validation": "validation_step", "test": "test_step", "predict": "predict_step"}
_EVAL_HOOK = {"validation": "on_validation_model_eval", "test": "on_test_model_eval", "predict": "on_predict_model_eval"}


class EvalLoop:
    """Runs one pass of `<stage>_step` in eval mode, without gradients, under autocast.

    The train/eval mode of every submodule is restored afterwards, so a submodule the
    user froze in eval mode stays that way.
    """

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.stage: str | None = None  # None while training: `self.log` then defaults to per-step

    def run(
        self, loader: Any, stage: str, limit: int | None | list[int | None] = None,
        before_end: Callable[[], None] | None = None, keep: bool = True, *, during_fit: bool = False,
    ) -> Any:
        """One pass: on_<stage>_start, the epoch (its batch hooks), on_<stage>_end.

        `loader` is one loader, or several (`EvalLoaders`) run one after the other within
        the one epoch, as Lightning runs them; `limit` caps each loader's batches (a list:
        one cap per loader). With several loaders the step and batch hooks receive
        `dataloader_idx`, values logged get Lightning's `/dataloader_idx_N` suffix, and the
        result is a list with one entry per loader.

        `before_end` runs once the pass's results are in, just before `on_<stage>_end`
        (the fit loop marks the validation complete there). `during_fit`: a validation inside
        fit (the sanity check, an epoch's or an interval's), which runs under `torch.no_grad`
        whatever `inference_mode` says, as Lightning's does: a `validation_step` may turn
        gradients on (`torch.set_grad_enabled(True)`) to fine-tune a copy of the model.

        The module's `on_<stage>_epoch_end` runs before the callbacks' (see docs/hooks.md):
        what it logs joins the epoch's results, which every callback then sees; what the
        callbacks' hooks log joins them after, before the epoch's row is written.
        """
        if no_loaders(loader):  # an empty list or dict of loaders: Lightning runs nothing, calls no hook
            return None if stage == "predict" else []  # and `predict` returns None, as Lightning's
        context = self.context
        module = module_of(context)
        loaders = loader_list(loader)
        several = isinstance(loader, EvalLoaders)
        check_dataloader_idx(module, stage, several)
        names = [str(key) for key in loader.keys] if several and takes_names(module, stage) else None
        step = context.strategy.step_callable(module, _STEP[stage])  # Lightning lets a step omit batch_idx
        timer = context.simple_profiler
        if timer is not None:  # profiler="simple"
            step = timer.wrap(step, f"[Module]{type(module).__name__}.{_STEP[stage]}")
        modes = {sub: sub.training for sub in module.modules()}
        eval_hook = own_hook(module, _EVAL_HOOK[stage])
        train_hook = own_hook(module, f"on_{stage}_model_train") if stage != "predict" else None
        if eval_hook is not None:
            eval_hook()  # the module's on_<stage>_model_eval decides the modes
        else:
            module.eval()
        completed = False
        self.stage = stage
        limits = list(limit) if isinstance(limit, list) else [limit] * len(loaders)
        totals: list[int | None] = []
        for index, one in enumerate(loaders):
            total = length_of(one)
            if isinstance(one, CombinedLoader):  # Lightning's combined batches, in one pass
                loaders[index] = batches_of(one)  # its iterator is made at the first batch, as a loader's
            if limits[index] is not None:  # limit_<stage>_batches / num_sanity_val_steps
                total = limits[index] if total is None else min(total, limits[index])  # type: ignore[type-var]
                loaders[index] = itertools.islice(loaders[index], limits[index])
            context.strategy.check_eval_lengths(total, stage)  # FSDP: every step is a collective
            totals.append(total)
        with context.uninterruptible():
            context.output.progress_start_eval(stage, None if None in totals else sum(totals))  # type: ignore[arg-type]
        try:
            autograd = grad_mode(context, during_fit)
            try:
                with autograd:
                    results = self._run(loaders, several, stage, step, keep, before_end, names)
            except RuntimeError as error:
                if isinstance(autograd, torch.inference_mode) and _needs_gradients(error):
                    raise RuntimeError(
                        f"{error}\n{_STEP[stage]} needs gradients (a backward, a fine-tuned copy of the model), but "
                        f"this {stage} pass runs under torch.inference_mode (Trainer(inference_mode=True), the "
                        "default), where torch.set_grad_enabled(True) can't turn them on. Expected "
                        "Trainer(inference_mode=False): the pass then runs under torch.no_grad (the validation "
                        "inside fit always does), which the step leaves with `with torch.enable_grad():` around "
                        "the work that needs gradients."
                    ) from error
                if isinstance(autograd, torch.no_grad) and _needs_gradients(error):
                    raise RuntimeError(
                        f"{error}\n{_STEP[stage]} needs gradients (a backward, a fine-tuned copy of the model), but "
                        f"this {stage} pass runs under torch.no_grad, as Lightning's does. Expected the work that "
                        "needs them inside `with torch.enable_grad():` in the step."
                    ) from error
                raise
            completed = True
            return results
        finally:
            self.stage = None
            context.metrics.batch = None
            context.metrics.dataloader_idx = None
            with context.uninterruptible():
                context.output.progress_end_eval()
            if completed and train_hook is not None:
                train_hook()  # the module's on_<stage>_model_train instead of restoring each mode
            else:
                for sub, mode in modes.items():
                    sub.training = mode

    def _run(self, loaders: list[Any], several: bool, stage: str, step: Callable[..., Any], keep: bool,
             before_end: Callable[[], None] | None, names: list[str] | None = None) -> Any:
        context = self.context
        module = module_of(context)
        device = context.strategy.device
        wants = context.hooks.wants
        want_start, want_end = wants(f"on_{stage}_batch_start"), wants(f"on_{stage}_batch_end")
        predictions: list[list[Any]] = [[] for _ in loaders]
        gather = context.strategy.all_gather_object  # the ranks agree on what each loader logged
        context.call(f"on_{stage}_start")
        context.call(f"on_{stage}_epoch_start")
        named: dict[str, Any] = {}
        by_keyword = names is not None and "dataloader_idx" in _parameters(module, _STEP[stage])
        for dataloader_idx, loader in enumerate(loaders):
            extra = (dataloader_idx,) if several else ()  # Lightning passes it only with several loaders
            step_extra = () if names is not None else extra
            if names is not None:  # the step asked for the loader's name (docs/data.md)
                named = {"dataloader_name": names[dataloader_idx], **({"dataloader_idx": dataloader_idx} if by_keyword else {})}
            context.metrics.dataloader_idx = dataloader_idx if several else None
            context.metrics.loader_name = None if names is None else names[dataloader_idx]
            mover = batch_mover(module, context.datamodule, device, dataloader_idx)  # the transfer hooks
            for batch_idx, batch in enumerate(loader):
                batch = move_to_device(batch, device) if mover is None else mover(batch)
                context.metrics.batch = batch  # its size weights the epoch means
                if want_start:
                    context.call(f"on_{stage}_batch_start", batch, batch_idx, *extra)
                with context.precision.autocast():
                    output = step(batch, batch_idx, *step_extra, **named)
                if stage == "predict" and keep:
                    predictions[dataloader_idx].append(to_host(output))  # the hooks see the step's own output
                if want_end:
                    context.call(f"on_{stage}_batch_end", output, batch, batch_idx, *extra)
                context.output.progress_advance_eval()
            if several and stage != "predict":  # Lightning computes metric objects as each loader ends
                context.metrics.close_loader(gather)
        context.metrics.dataloader_idx = None  # what the epoch-end hooks log belongs to every loader
        context.metrics.loader_name = None
        if stage == "predict":
            context.call("on_predict_epoch_end")
            context.call("on_predict_end")
            return predictions if several else predictions[0]
        # The module's epoch-end hook may still log (e.g. a metric computed over the
        # epoch), so it runs before the epoch closes; callbacks then see the results.
        context.metrics.epoch_end_reached = True
        try:
            context.hooks.call_module(f"on_{stage}_epoch_end")
        finally:
            context.metrics.epoch_end_reached = False
        owners = context.metrics.eval_owners(gather if several else None)
        epoch_values = context.metrics.close_epoch(context.strategy.reduce_epoch, gather)
        results = to_floats(epoch_values)
        context.hooks.call_callbacks(f"on_{stage}_epoch_end", context.trainer, module)
        # What the callbacks' epoch-end hooks logged (a k-NN accuracy over the epoch) joins the
        # results, the written row and callback_metrics, as in Lightning (it belongs to every loader).
        results.update(to_floats(context.metrics.close_epoch(context.strategy.reduce_epoch, gather)))
        if not context.sanity_checking:  # the sanity check's numbers are never written
            context.output.log_eval(results)
        if before_end is not None:
            before_end()
        context.call(f"on_{stage}_end")
        if not several:
            return results
        return [per_loader(results, owners, index) for index in range(len(loaders))]


def per_loader(results: dict[str, float], owners: dict[str, int | None], index: int) -> dict[str, float]:
    """Loader `index`'s share of an evaluation's results, as Lightning returns it: what was
    logged while its batches ran, then what was logged outside them (the epoch hooks)."""
    mine = {name: value for name, value in results.items() if owners.get(name) == index}
    mine.update((name, value) for name, value in results.items() if owners.get(name) is None)
    return mine


def _parameters(module: Any, hook: str) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(getattr(module, hook)).parameters
    except (TypeError, ValueError):
        return {}


def takes_names(module: Any, stage: str) -> bool:
    """Whether the module's `<stage>_step` declares `dataloader_name`: it then receives each
    loader's name (a dict's key, a list's position as a string), and what it logs is kept as
    `name/<loader name>` instead of `name/dataloader_idx_N` (docs/data.md)."""
    return "dataloader_name" in _parameters(module, _STEP[stage])


def check_dataloader_idx(module: Any, stage: str, several: bool) -> None:
    """Lightning's rule, before any batch: with several loaders the step and the module's batch
    hooks take `dataloader_idx`; with one, a `dataloader_idx` they declare needs a default."""
    prefix = {"validation": "val", "test": "test", "predict": "predict"}[stage]
    for hook in (_STEP[stage], f"on_{stage}_batch_start", f"on_{stage}_batch_end"):
        try:
            params = inspect.signature(getattr(module, hook)).parameters
        except (TypeError, ValueError):
            continue
        present = "dataloader_idx" in params or any(p.kind is p.VAR_POSITIONAL for p in params.values())
        present = present or (hook == _STEP[stage] and "dataloader_name" in params)  # the step asks for names
        name = f"{type(module).__name__}.{hook}()"
        if several and not present:
            raise ValueError(
                f"{name} expected a `dataloader_idx` argument: several {prefix} loaders run one after the other "
                f"and each batch says which one it came from. Received: a signature without it. Add "
                f"`dataloader_idx=0` to its signature."
            )
        for argument, default in (("dataloader_idx", "0"), ("dataloader_name", "None")):
            if not several and argument in params and params[argument].default is inspect.Parameter.empty:
                raise ValueError(
                    f"{name} declares `{argument}` without a default, but there is one {prefix} loader, which "
                    f"passes none. Expected `{argument}={default}` (or no such argument): give it a default."
                )


def _needs_gradients(error: RuntimeError) -> bool:
    """Whether `error` is autograd's complaint about a backward through inference tensors."""
    text = str(error)
    return "does not require grad" in text or "Inference tensors cannot be saved for backward" in text


def grad_mode(context: RunContext, during_fit: bool = False) -> contextlib.AbstractContextManager[Any]:
    """`torch.inference_mode` for a whole pass (`Trainer(inference_mode=True)`, Lightning's default),
    else `torch.no_grad`; also `no_grad` for a validation inside fit (`during_fit`) and where
    inference tensors are not supported: FSDP, and collectives over Gloo (as Lightning decides)."""
    from trainer.strategies.fsdp import FSDP

    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if (
        not context.args.inference_mode
        or during_fit
        or isinstance(context.strategy, FSDP)
        or (distributed and torch.distributed.get_backend() == "gloo")
    ):
        return torch.no_grad()
    return torch.inference_mode()
