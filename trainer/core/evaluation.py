"""`Trainer.validate/test/predict`: the evaluation entry points, and the results they return.

`validate`/`test` return a dict of the epoch-averaged metrics (the contract); Lightning returns
a list with one such dict per dataloader, so the dict also answers `results[0]` with itself
(`trainer.test(...)[0]["test_loss"]` runs unchanged). With several loaders they return
Lightning's list itself: one dict per loader, in order. With `verbose=True` (Lightning's
default) rank 0 prints the table Lightning prints.
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.core.flags import torch_flags
from trainer._utils import length_of
from trainer.checkpoint.latest import note
from trainer.core.compiled_module import from_compiled
from trainer.loops.batches import check_module
from trainer.loops.combined import CombinedLoader
from trainer.loops.evaluation import EvalLoop
from trainer.loops.hooks import Dispatcher, with_module_callbacks
from trainer.loops.loaders import EvalLoaders, loader_list
from trainer.module import Module, own_hook
from trainer.loops.schedule import batch_limit
from trainer.loops.worker_seeds import seed_workers
from trainer.states import TrainerFn

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.loops.hooks import CallbackBase
    from trainer.loops.context import RunContext
    from trainer.strategies import Strategy

__all__ = ["TrainerEvaluation", "EvalResults", "results_table"]

log = logging.getLogger("trainer")


class EvalResults(dict):  # type: ignore[type-arg]
    """The metrics of a `validate`/`test` pass, by name. `results[0]` is the dict itself:
    Lightning returns `[metrics]` (one dict per dataloader), so Lightning code indexing the
    first dataloader reads the same values.

    Example:
        >>> results = EvalResults({"test_loss": 0.25})
        >>> results[0]["test_loss"], results["test_loss"]
        (0.25, 0.25)
    """

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int and key == 0:
            return self
        return super().__getitem__(key)


def results_table(results: list[dict[str, float]], stage: str) -> str:
    """Lightning's printed table of an evaluation's metrics (its plain-text form): one column
    per loader, each metric by its name without the `/dataloader_idx_N` suffix."""
    columns_of = [{name.split("/dataloader_idx_")[0]: value for name, value in each.items()} for each in results]
    names = sorted({name for each in columns_of for name in each})
    headers = [f"DataLoader {index}" for index in range(len(results))]
    header = f"{'Validate' if stage == 'validation' else stage.capitalize()} metric"
    columns = shutil.get_terminal_size(fallback=(120, 30)).columns or 120
    width = int(min(max(max(map(len, names)), max(map(len, headers)), 25), columns / 2))
    try:
        bar_character = "─" if sys.stdout.encoding is None or "─".encode(sys.stdout.encoding) else "-"
    except UnicodeEncodeError:
        bar_character = "-"
    bar = bar_character * columns
    per_table = max(int((columns - width) / width), 1)
    lines: list[str] = []
    for start in range(0, len(headers), per_table):
        shown = range(start, min(start + per_table, len(headers)))
        row = f"{{:^{width}}}" * (len(shown) + 1)
        lines += [bar, row.format(header, *(headers[i] for i in shown)).rstrip(), bar]
        lines += [row.format(name, *(f"{columns_of[i][name]}" if name in columns_of[i] else " " for i in shown)).rstrip()
                  for name in names]
        lines.append(bar)
    return "\n".join(lines)


class TrainerEvaluation:
    """Mixed into `Trainer`: `validate`, `test` and `predict`."""

    args: TrainerArgs
    strategy: Strategy
    callbacks: list[CallbackBase]
    _run: RunContext
    _eval: EvalLoop
    _eval_loaders: dict[str, Any] | None
    _eval_batches: dict[str, list[int | float]] | None
    _interrupted: bool
    _running: str | None
    _last_call: str | None
    _ckpt_path: str | None

    def _chosen_ckpt_path(self, given: Any, verb: str) -> Any:  # pragma: no cover - defined by Trainer
        raise NotImplementedError

    def validate(self, model: Module | None = None, loader: Any = None, ckpt_path: str | Path | None = None,
                 verbose: bool = True, *, dataloaders: Any = None, datamodule: Any = None,
                 weights_only: bool | None = None) -> Any:
        """Run `validation_step` over `loader` (or `dataloaders=`/`datamodule=`, or the module's
        `val_dataloader()`); return the epoch-averaged metrics (several loaders: a list of them,
        one dict per loader). Without `model`, the fitted one."""
        return self._evaluate("validation", model, loader, ckpt_path, dataloaders, datamodule, verbose)  # type: ignore[no-any-return]

    def test(self, model: Module | None = None, loader: Any = None, ckpt_path: str | Path | None = None,
             verbose: bool = True, *, dataloaders: Any = None, datamodule: Any = None,
             weights_only: bool | None = None) -> Any:
        """Run `test_step` over `loader` (or `dataloaders=`/`datamodule=`, or the module's
        `test_dataloader()`); return the epoch-averaged metrics (several loaders: a list of them,
        one dict per loader). Without `model`, the fitted one."""
        return self._evaluate("test", model, loader, ckpt_path, dataloaders, datamodule, verbose)  # type: ignore[no-any-return]

    def predict(self, model: Module | None = None, loader: Any = None, ckpt_path: str | Path | None = None, *,
                dataloaders: Any = None, datamodule: Any = None, return_predictions: bool | None = None,
                weights_only: bool | None = None) -> list[Any] | None:
        """Return the list of `predict_step` outputs over `loader` (or `dataloaders=`/`datamodule=`, or
        the module's `predict_dataloader()`; several loaders: one such list per loader);
        `return_predictions=False` keeps none and returns None."""
        keep = return_predictions is None or bool(return_predictions)
        return self._evaluate("predict", model, loader, ckpt_path, dataloaders, datamodule, False, keep)  # type: ignore[no-any-return]

    def _evaluate(self, stage: str, model: Module | None, loader: Any, ckpt_path: Any, dataloaders: Any,
                  datamodule: Any, verbose: bool, keep: bool = True) -> Any:
        verb = "validate" if stage == "validation" else stage
        ckpt_path = self._chosen_ckpt_path(ckpt_path, verb)  # `trainer.ckpt_path = path` (Lightning's)
        if model is None:  # Lightning: the model of the previous fit
            model = self._run.module
            if model is None:
                raise ValueError(f"{verb}() expected a model: pass trainer.{verb}(model, ...), or call fit first "
                                 f"and {verb}() uses the fitted one. Received: no model.")
            if ckpt_path is None and any(getattr(cb, "best_model_path", "") for cb in self.callbacks):
                ckpt_path = "best"
                log.warning("%s(ckpt_path=None) was called without a model: the best checkpoint of the previous fit "
                            "is used (Lightning's rule). Pass ckpt_path='best' or 'last' to choose.", verb)
        model = from_compiled(model, self.args.compile)  # torch.compile(module): the module, compiled
        check_module(model, verb)
        step = {"validation": "validation_step", "test": "test_step"}.get(stage)
        if step is not None and own_hook(model, step) is None:  # Lightning refuses too, rather than return nothing
            raise ValueError(f"{verb}() runs {step}, and {type(model).__name__} has none. Expected a method "
                             f"`{step}(self, batch, batch_idx)` that logs its metrics with self.log.")
        self._running, self._last_call, self._interrupted = verb, verb, False
        try:
            (loader,) = self._loaders(verb, model, datamodule, loader if loader is not None else dataloaders)
            self._evaluation_loader(model, stage, loader, call=False)  # no loader at all: an error before any work
            checkpoint = self._run.checkpoints.read_checkpoint(ckpt_path, weights_only=True, module=model) if ckpt_path is not None else None
            if checkpoint is not None:
                self._ckpt_path = checkpoint.get("_path")
                if str(ckpt_path) in ("last", "best") and self.strategy.is_global_zero:  # which file the name chose
                    note(logging.INFO, "%s(ckpt_path=%r): the weights of %s, written at optimizer step %s.", verb,
                         str(ckpt_path), checkpoint.get("_path", "the checkpoint"), checkpoint.get("global_step", "?"))
            with torch_flags(self.args):
                return self._run_evaluation(stage, model, loader, checkpoint, verbose, keep)
        finally:
            self._running = None

    def _run_evaluation(self, stage: str, model: Module, loader: Any, checkpoint: Any, verbose: bool, keep: bool) -> Any:
        if model is not self._run.module:  # another model: a later fit starts a fresh run for it
            self._run.module, self._run.optimizers = model, None
        model._attach(self, self._run)
        self.callbacks = with_module_callbacks(self.callbacks, model)
        self._run.hooks = Dispatcher(model, self.callbacks, self._run.simple_profiler)
        hook_stage = TrainerFn("validate" if stage == "validation" else stage)  # Lightning passes the enum
        self._run.metrics.clear_latest()  # a new callback_metrics dict holds this call's values, as Lightning's
        self._run.output.forget_shown()
        self._run.call("setup", hook_stage)
        try:
            if type(model).configure_model is not Module.configure_model:
                model.configure_model()  # Lightning's: after setup, in every stage
            loader = self._evaluation_loader(model, stage, loader)
            self.strategy.setup_module(model)
            if checkpoint is not None:
                self._run.checkpoints.restore_weights(checkpoint)
            self._eval = EvalLoop(self._run)
            self._run.output.run_start_actions()
            self._run.output.log_graph(model)  # TensorBoardLogger(log_graph=True): at every stage's start, as Lightning

            def prepare(one: Any) -> Any:
                if self.args.use_distributed_sampler:
                    one = self.strategy.setup_loader(one, train=False)
                seed_workers(one, self.strategy.global_rank)  # seed_everything(workers=True), as Lightning
                return one

            limit_name = f"limit_{'val' if stage == 'validation' else stage}_batches"
            loader = loader.map(prepare) if isinstance(loader, EvalLoaders) else prepare(loader)
            counts = [batch_limit(getattr(self.args, limit_name), length_of(one), limit_name) for one in loader_list(loader)]
            count: Any = counts if isinstance(loader, EvalLoaders) else counts[0]
            self._eval_loaders = {**(self._eval_loaders or {}), stage: loader}  # trainer.test_dataloaders, ...
            reported = counts
            if isinstance(loader, CombinedLoader):  # Lightning reports each of its iterables' batches
                reported = [batch_limit(getattr(self.args, limit_name), length_of(one), limit_name) for one in loader.flattened]
            self._eval_batches = {**(self._eval_batches or {}),
                                  stage: [math.inf if each is None else each for each in reported]}
            results = self._eval.run(loader, stage, count, keep=keep)
        except BaseException as error:
            self._interrupted = True
            try:  # the callbacks' (and the DataModule's) on_exception, as Lightning calls them in every stage
                self._run.call("on_exception", error)
                if callable(getattr(self._run.datamodule, "on_exception", None)):
                    self._run.datamodule.on_exception(error)
            finally:
                self.strategy.teardown(failed=True)
            raise
        finally:
            self._run.metrics.renew_view()
            self._run.call("teardown", hook_stage)
            if self._run.datamodule is not None and callable(getattr(self._run.datamodule, "teardown", None)):
                self._run.datamodule.teardown(stage=hook_stage)
        if stage == "predict":
            return results if keep else None
        if isinstance(results, list):  # several loaders: Lightning's list, one dict per loader
            if verbose and self.strategy.is_global_zero and any(results):
                sys.stdout.write(results_table(results, stage) + "\n")
            return [dict(each) for each in results]
        results = EvalResults(results)
        if verbose and self.strategy.is_global_zero and results:
            sys.stdout.write(results_table([results], stage) + "\n")
        return results

    # ------------------------------------------------------------------ defined by Trainer
    def _call(self, hook: str, *args: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def _loaders(self, stage: str, model: Module, datamodule: Any, *loaders: Any) -> tuple[Any, ...]:  # pragma: no cover
        raise NotImplementedError

    def _evaluation_loader(self, model: Module, stage: str, loader: Any, *, call: bool = True) -> Any:  # pragma: no cover
        raise NotImplementedError
