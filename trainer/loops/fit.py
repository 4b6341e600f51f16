"""The fit loop: epochs, and the batches of one epoch.

    sanity check: num_sanity_val_steps validation batches
    on_train_start
    while not finished (max_epochs, max_steps, max_time) and no stop (after min_epochs/min_steps):
        on_train_epoch_start                      (also when a run resumes inside an epoch,
                                                   then the checkpoint's restore once more)
        for each micro-batch (windows of accumulate_grad_batches):
            on_train_batch_start
            optimization.run(batch)               automatic.py or manual.py
            (the epoch's last batch: epoch-interval schedulers that read no metric, as Lightning)
            on_train_batch_end                    after the step a window's last batch completes
            stop after a step at max_steps or on request
            validation when val_check_interval says so (schedule.py)
        validation (on_validation_start ... on_validation_end)
        on_train_epoch_end                        the module's, then the callbacks'
        epoch-interval ReduceLROnPlateau (the others if the last batch wasn't known); last.ckpt
    on_train_end

What one step does lives in the optimization object; this file only says when. The sanity check
and the validations inside fit run in `fit_validation.py`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import logging
import warnings
from collections.abc import Iterator
from typing import Any

from trainer._utils import length_of, move_to_device
from trainer.loops.automatic import AutomaticOptimization
from trainer.loops.batches import batch_mover, empty_loader_message, micro_batches
from trainer.loops.guard import RollBack, recorded_skips, roll_back, skip_recorded
from trainer.loops.resume import restore_after_epoch_start, restore_streams_after_train_start
from trainer.loops.schedule import ValidationSchedule, batch_limit, parse_max_time
from trainer.logging.profiler import StepProfiler
from trainer.logging.step_time import clock_of
from trainer.loops.combined import CombinedLoader, batches_of
from trainer.loops.mixture import log_samples
from trainer.loops.evaluation import check_dataloader_idx
from trainer.loops.fit_validation import FitValidation
from trainer.loops.loaders import EvalLoaders
from trainer.loops.context import Evaluation, ManualSteps, RunContext, manual_of, module_of, optimizers_of
from trainer.loops.monitors import MonitorCheck
from trainer.logging.metrics import MonitorError

__all__ = ["FitLoop"]

log = logging.getLogger("trainer")


class FitLoop(FitValidation):
    def __init__(self, context: RunContext, evaluation: Evaluation, val_loader: Any) -> None:
        self.context, self.evaluation = context, evaluation
        module, args = module_of(context), context.args
        self.optimization: AutomaticOptimization | ManualSteps = (
            AutomaticOptimization(context) if module.automatic_optimization else manual_of(context)
        )
        context.fit_loop = self  # what a checkpoint and Module.clip_gradients reach
        wants = context.hooks.wants
        self.want_batch_start = wants("on_train_batch_start")
        self.want_batch_end = wants("on_train_batch_end")
        self.running = False  # inside run(): what trainer.num_val_batches reads
        self.val_loader = val_loader if args.limit_val_batches != 0 else None
        self.max_time = parse_max_time(args.max_time)
        self.epoch_batches: int | None = None
        self.batch_running = -1  # the training batch being run (-1: none yet this epoch); trainer.is_last_batch
        self.schedule: ValidationSchedule | None = None
        self.open_after_sanity = False  # the first epoch's iterator, opened after the sanity check (Lightning's moment)
        self.validate_at_end = False
        self.val_limit: int | None | list[int | None] = None  # a list: one per loader (several loaders)
        self.profiler = StepProfiler.from_arg(args.profiler)
        self.clock = clock_of(context.callbacks)  # a StepTimeBreakdown's (logging/step_time.py); usually None
        if context.simple_profiler is not None:  # profiler="simple": time every training batch
            self.optimization.run = context.simple_profiler.wrap(self.optimization.run, "run_training_batch")  # type: ignore[method-assign]
        self.loaded_epoch = 0  # reload_dataloaders_every_n_epochs: the epoch the train loader was made for
        self.val_loaded_epoch: float = 0  # and the val loader's (-inf: before its first validation)
        self._warned_nothing_learned = False
        self._warned_used_up = False
        self.rng_before_validation: dict[str, Any] | None = None  # while a validation is pending
        self.monitors = MonitorCheck(validates=self.val_loader is not None)  # every monitor, checked early (monitors.py)

    # ------------------------------------------------------------------------ epochs
    def finished(self) -> bool:
        args, state = self.context.args, self.context.state
        if args.max_steps is not None and state.global_step >= args.max_steps:
            return True
        if self.max_time is not None and self.context.strategy.world_size == 1 and self._elapsed() >= self.max_time:
            return True
        if args.max_epochs is not None:
            max_epochs: int | None = args.max_epochs
        elif args.max_steps or self.max_time:
            max_epochs = None
        else:  # no limit given: one epoch, or as many as min_epochs / min_steps ask for
            if args.min_steps is not None and state.global_step < args.min_steps:
                return False
            max_epochs = max(1, args.min_epochs or 0)
        return max_epochs is not None and state.epoch >= max_epochs

    def stop_now(self) -> bool:
        """A requested stop (EarlyStopping, should_stop) once min_epochs/min_steps are met;
        SIGTERM (preemption) at once."""
        context = self.context
        if not context.state.stop_requested:
            return False
        if context.preempted:
            return True
        args, state = context.args, context.state
        min_epochs = args.min_epochs if args.min_epochs is not None else (1 if args.min_steps is not None else None)
        return (min_epochs is None or state.epoch >= min_epochs) and (  # min_steps alone: one epoch too (Lightning)
            args.min_steps is None or state.global_step >= args.min_steps
        )

    def _elapsed(self) -> float:
        return self.context.state.elapsed_now()

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """While `run` runs: what `trainer.num_val_batches` reads, the max_time clock stopped at
        the end, and a monitor's own error reported with every other monitor missing by then."""
        context = self.context
        self.running = True  # the sanity check included (the clock starts after it)
        try:
            yield
        except MonitorError as error:
            combined = self.monitors.combined(context, error)
            if combined is error:
                raise
            raise combined from None
        finally:
            context.state.stop_clock()
            self.running = False

    def _measure(self, train_loader: Any) -> None:
        """Batches per epoch, the validation schedule and the validation limit of these loaders."""
        args = self.context.args
        self.epoch_batches = batch_limit(args.limit_train_batches, length_of(train_loader), "limit_train_batches")
        if self.epoch_batches == 0:
            raise ValueError(
                f"Trainer(limit_train_batches={args.limit_train_batches!r}) leaves no training batch. Expected "
                "a positive number or fraction; to only evaluate, call trainer.validate(model, loader)."
            )
        # without validation (no loader, limit_val_batches=0) the interval is never used, so never refused (Lightning)
        interval = args.val_check_interval if self.val_loader is not None else None
        self.schedule = ValidationSchedule(interval, args.check_val_every_n_epoch, self.epoch_batches)
        self._measure_val()

    def _measure_val(self) -> None:
        """The validation limit of the val loader (one per loader when several)."""
        args = self.context.args
        if self.val_loader is not None:  # a step without dataloader_idx for several loaders: before any batch
            check_dataloader_idx(module_of(self.context), "validation", isinstance(self.val_loader, EvalLoaders))
        if isinstance(self.val_loader, EvalLoaders):  # several: a limit per loader, as Lightning's
            self.val_limit = [batch_limit(args.limit_val_batches, length_of(one), "limit_val_batches")
                              for one in self.val_loader.loaders]
        elif self.val_loader is not None:
            self.val_limit = batch_limit(args.limit_val_batches, length_of(self.val_loader), "limit_val_batches")

    def _reload(self, train_loader: Any) -> Any:
        """`reload_dataloaders_every_n_epochs=n`: at the start of every n-th epoch, the data
        source's train loader again (Lightning's rule; the val loader is asked for again by the
        first validation n or more epochs after its last load, `reload_val`); loaders passed to
        fit directly stay."""
        context, n = self.context, self.context.args.reload_dataloaders_every_n_epochs
        state = context.state
        if not n or state.batches_done or state.epoch - self.loaded_epoch < n:
            return train_loader
        self.loaded_epoch = state.epoch
        reloaded = context.reload_loader(module_of(context), "train")
        if reloaded is not None:
            (train_loader,) = reloaded
            context.train_loader = train_loader
            self._measure(train_loader)
        # Lightning opens a reloaded loader's iterator once more than it uses (its data setup
        # and its epoch start each call iter()): a DataLoader draws a seed each time, and the
        # epoch's order follows from the second. The same draw keeps Lightning's weights.
        iter(train_loader)
        return train_loader

    def _nothing_to_train(self, train_loader: Any) -> bool:
        """A fit whose limits are already reached: `max_epochs=0`/`max_steps=0` (Lightning's way
        to run only the sanity check: no training hook, nothing saved), or a resume from a run
        that reached them (`on_train_start`/`on_train_end` still run, so what a run stopped at
        its end left unfinished, such as SWA's final transfer, completes). Returns whether only
        the sanity check runs."""
        context, args = self.context, self.context.args
        sanity_only = args.max_epochs == 0 or args.max_steps == 0
        if sanity_only:
            log.info("fit trains nothing: max_epochs=%s / max_steps=%s (the sanity check only, as in Lightning).",
                     args.max_epochs, args.max_steps)
        else:
            log.warning(  # a warning, so a notebook (no logging configured) shows it
                "Nothing to train: the run already reached max_epochs=%s / max_steps=%s%s. To train further, "
                "create a Trainer with higher limits and call its fit with ckpt_path=%s (with the trainer command: "
                "raise --trainer.max_epochs or --trainer.max_steps and pass --ckpt_path last).",
                args.max_epochs, args.max_steps, "" if self.max_time is None else f" / max_time={args.max_time!r}",
                repr(str(context.checkpoints.last_path)) if args.enable_checkpointing else "<a trainer.save_checkpoint(path) file>",
            )
        context.data_order.settle(train_loader)
        return sanity_only

    def run(self, train_loader: Any) -> None:
        with self._running():
            context, args = self.context, self.context.args
            self._measure(train_loader)
            self.loaded_epoch = context.state.epoch
            assert self.schedule is not None  # the first validating epoch keeps the loader fit started with
            self.val_loaded_epoch = context.state.epoch if self.schedule.epoch_validates(context.state.epoch) \
                else -math.inf
            nothing = self.finished()
            if nothing and self._nothing_to_train(train_loader):  # Lightning's sanity-check-only run
                self.sanity_check()
                return
            self.sanity_check()
            if self.open_after_sanity and not nothing:
                context.strategy.set_epoch(train_loader, context.state.epoch)
                context.data_order.open_ahead(train_loader, context.state.epoch)
            warn_eval_modules(module_of(context))
            context.call("on_train_start")
            restore_streams_after_train_start(context)  # a resume at an epoch's start: the hooks' draws undone
            context.state.start_clock()  # max_time counts training from here, as Lightning's Timer (no sanity check)
            if self.profiler is not None and context.strategy.is_global_zero:
                self.profiler.start(context.output.run_dir / "profiler")
            try:
                while not self.finished() and not self.stop_now():
                    train_loader = self._reload(train_loader)
                    steps_before, batches_before = context.state.global_step, context.state.batches_done
                    learned_before = getattr(self.optimization, "learning_windows", None)
                    try:
                        if not self.train_epoch(train_loader):
                            break
                    except RollBack as rollback:  # nonfinite_loss="rollback": back to the newest checkpoint
                        roll_back(context, rollback)
                        continue
                    if context.state.batches_done > batches_before:  # the epoch ran batches (not only its end)
                        self._check_progress(steps_before, learned_before)
                    self.end_epoch()
            finally:
                if self.profiler is not None:
                    self.profiler.stop()
            self.reconcile()
            context.output.log_last_step()  # a run ending between logging steps writes its last step too
            context.checkpoints.save_last()
            context.call("on_train_end")

    def gradients_spent(self) -> bool:
        """The gradients present belong to a finished optimizer step (kept until the next
        window's start, where Lightning zeroes them), not to a window in progress."""
        optimization = self.optimization
        return isinstance(optimization, AutomaticOptimization) and optimization.spent

    def reconcile(self, raise_now: bool = True) -> None:
        """Device-counted skips (fused optimizers) made visible: before epoch ends and saves."""
        optimization = self.optimization
        if isinstance(optimization, AutomaticOptimization) and optimization.pending():
            optimization.reconcile(raise_now)

    def end_epoch(self) -> None:
        context, state = self.context, self.context.state
        self.reconcile()
        log_samples(context.metrics, context.train_loader)  # a Mixture's samples per source
        # The epoch's on_epoch training values close after its validation, as Lightning's: the
        # validation hooks see the previous epoch's in callback_metrics.
        assert self.schedule is not None
        if (
            self.val_loader is not None
            and not state.epoch_end_validated  # a resume into this epoch's end after its validation
            and (state.validation_pending or self.schedule.at_epoch_end(state.epoch, self.validate_at_end))
        ):
            self.validate(epoch_end=True)
            state.epoch_end_validated = True
        self.validate_at_end = False
        # The module's hook first; what it logs (on_epoch) closes into the epoch's values, which
        # the callbacks then see in callback_metrics (EarlyStopping(check_on_train_epoch_end=True)).
        context.metrics.epoch_end_reached = True
        try:
            context.hooks.call_module("on_train_epoch_end")
        finally:
            context.metrics.epoch_end_reached = False
        context.output.close_train_epoch()
        self.monitors.due.add("train_epoch_end")
        # What a callback logs in its own on_train_epoch_end is in callback_metrics at once, as in
        # Lightning: EarlyStopping and ModelCheckpoint, which run after the other callbacks, see it.
        context.metrics.epoch_end_reached = True
        try:
            context.hooks.call_callbacks("on_train_epoch_end", context.trainer, module_of(context))
        finally:
            context.metrics.epoch_end_reached = False
        optimization = self.optimization
        if optimizers_of(context).schedulers and isinstance(optimization, AutomaticOptimization):
            if not state.epoch_schedulers_stepped:  # the epoch ended without a known last batch
                optimization.step_schedulers("epoch", state.epoch + 1, monitored=False)
            optimization.step_schedulers("epoch", state.epoch + 1, monitored=True)  # after what logs their metric
        state.epoch += 1
        state.epoch_end_validated = state.epoch_schedulers_stepped = False
        state.batches_before_epoch += state.batches_done
        state.batches_done = 0
        self.batch_running = -1
        with context.uninterruptible():
            context.output.end_epoch()
            # the epoch-end files: `on_save_checkpoint` sees the epoch that ended as current_epoch,
            # as Lightning's, whose epoch-end saves run before it counts the epoch
            state.shown_epoch = state.epoch - 1
            try:
                context.checkpoints.save_last()
                # A callback's epoch-end file waiting for this cut (ModelCheckpoint) is written now,
                # before the next epoch's start hooks change what it holds.
                for callback in context.hooks.callbacks:
                    at_cut = getattr(callback, "_at_epoch_cut", None)
                    if callable(at_cut):
                        at_cut(context.trainer)
            finally:
                state.shown_epoch = None
        context.agree_stop()

    def _step_epoch_schedulers(self) -> None:
        """After the epoch's last optimizer step (train_epoch decided the loop is automatic)."""
        state, optimization = self.context.state, self.optimization
        if not state.epoch_schedulers_stepped and isinstance(optimization, AutomaticOptimization):  # for mypy
            optimization.step_schedulers("epoch", state.epoch + 1, monitored=False)
            state.epoch_schedulers_stepped = True

    def _check_progress(self, steps_before: int, learned_before: int | None) -> None:
        """An epoch without a single optimizer step: never loop forever on max_steps. An epoch
        whose every training_step returned None learned nothing: said once, loudly."""
        context = self.context
        learned = getattr(self.optimization, "learning_windows", None)
        if learned is not None and learned == learned_before and not self._warned_nothing_learned:
            self._warned_nothing_learned = True
            log.warning(
                "training_step returned None for every batch of epoch %d, so nothing was learned (each skipped "
                "window still counts as an optimizer step, as in Lightning). Expected training_step to return "
                "the loss; to step optimizers yourself, set self.automatic_optimization = False.", context.state.epoch,
            )
        if context.state.global_step != steps_before or context.args.max_steps is None:
            return
        raise RuntimeError(
            f"Epoch {context.state.epoch} ended without a single optimizer step, so max_steps="
            f"{context.args.max_steps} would never be reached. Expected at least one step per epoch: call "
            "opt.step() on an optimizer from self.optimizers() in training_step."
        )

    # ------------------------------------------------------------------- one epoch
    @contextlib.contextmanager
    def _training_batches(self) -> Iterator[None]:
        """Inside an epoch's batch loop, where `self.log` defaults to per-step values."""
        context = self.context
        context.in_train_batches = True
        try:
            yield
        finally:
            context.in_train_batches = False
            context.metrics.batch = None

    def train_epoch(self, loader: Any) -> bool:
        """Run (the rest of) one epoch; return whether it reached its end."""
        with self._training_batches():
            context = self.context
            state, args, strategy = context.state, context.args, context.strategy
            strategy.set_epoch(loader, state.epoch)  # each submodule trains in the mode the module set (Lightning's rule)
            length = length_of(loader)
            if length == 0:
                raise ValueError(empty_loader_message(loader))
            total = self.epoch_batches
            distributed = strategy.world_size > 1
            if distributed:
                strategy.check_epoch_lengths(total)
            context.call("on_train_epoch_start")  # also on a resume inside the epoch
            restore_after_epoch_start(context)  # ...whose checkpoint then wins over what it reset (resume.py)
            # The epoch's order is recorded at its start; a resume inside it replays the order and
            # skips what was consumed (loops/data_order.py), then restores the checkpoint's random state.
            iterator = context.data_order.epoch_iterator(loader, state.batches_done, state.epoch)
            combined = isinstance(loader, CombinedLoader)
            if combined:  # Lightning's (batch, batch_idx, dataloader_idx): the step gets the batch
                iterator = batches_of(iterator)
            if total is None and isinstance(args.limit_train_batches, int):  # an iterable loader, capped
                iterator = itertools.islice(iterator, max(args.limit_train_batches - state.batches_done, 0))
            with context.uninterruptible():
                context.output.progress_start_epoch(total)
            device, optimization = strategy.device, self.optimization
            mover = batch_mover(module_of(context), context.datamodule, device)  # the transfer hooks
            batches = iterator
            if self.clock is not None:  # next() and the transfer timed, wrapped once per epoch
                batches, mover = self.clock.timed(iterator), self.clock.timed_mover(mover, device)
            want_start, want_end = self.want_batch_start, self.want_batch_end
            k = args.accumulate_grad_batches if args.accumulate_grad_batches else 1
            optimization.reset()
            # the plain step directly (loops/plain.py), unless the simple profiler times `run`
            run = optimization.run
            if isinstance(optimization, AutomaticOptimization) and optimization.plain and context.simple_profiler is None:
                run = optimization.plain_run
            batch_idx = state.batches_done - 1
            schedule, validating, metrics = self.schedule, self.val_loader is not None, context.metrics
            # Lightning steps the epoch-interval schedulers that read no metric right after the
            # epoch's last step, before on_train_batch_end and the epoch's validation (those hooks
            # and a checkpoint written in them see the stepped schedulers). Without a known last
            # batch (a loader without len()) they step at the epoch's end.
            epoch_schedulers = total is not None and isinstance(optimization, AutomaticOptimization) and any(
                config.interval == "epoch" and config.monitor is None for config in optimizers_of(context).schedulers)
            assert schedule is not None
            fewest = strategy.fewest if distributed and total is None else None
            if state.validation_pending and not validating:
                state.validation_pending = False  # resumed without a validation loader: nothing is owed
            elif state.validation_pending and (total is None or state.batches_done < total):
                self.validate()  # resumed from a checkpoint written during a mid-epoch validation
            skips, skip_end = recorded_skips(context) if state.skipped_windows else None, -1
            for batch_idx, size, last, batch in micro_batches(batches, total, k, state.batches_done, fewest):
                before = state.batches_done  # the position at this window's start
                if skips and (batch_idx < skip_end or batch_idx in skips):  # a window the guard skipped (guard.py)
                    skip_end = max(skip_end, skips.get(batch_idx, skip_end))
                    skip_recorded(context, batch, batch_idx, last)
                else:
                    batch = move_to_device(batch, device) if mover is None else mover(batch)
                    self.batch_running = batch_idx
                    if want_start and _skips_rest(context.call("on_train_batch_start", batch, batch_idx)):
                        return True  # the module's -1: the rest of this epoch is skipped (Lightning); its end runs
                    metrics.batch = batch  # its size weights epoch means logged without batch_size
                    output = run(batch, batch_idx, size, last)  # advances the bar before a step logs
                    if epoch_schedulers and last and state.batches_done >= total:  # type: ignore[operator]
                        self._step_epoch_schedulers()
                    if want_end:
                        context.call("on_train_batch_end", optimization.batch_end_outputs(output), batch, batch_idx)
                    if not self.monitors.done:
                        self.monitors.after_training_batch(context)
                if last:
                    if self.profiler is not None:
                        self.profiler.step()
                    validated = False
                    if validating and schedule.crossed(state.epoch, before, state.batches_done, state.batches_before_epoch):
                        if total is not None and state.batches_done >= total:
                            self.validate_at_end = True  # the epoch's end validates, after the epoch's metrics
                        else:
                            self.validate()
                            validated = True
                    stop = args.max_steps is not None and state.global_step >= args.max_steps
                    if not stop and self.max_time is not None and self._elapsed() >= self.max_time:
                        stop = context.strategy.world_size == 1
                        context.stop_request = True  # DDP: agreed at the next logging step
                    if context.preempted:  # SIGTERM on this rank; DDP: the step is agreed through the store
                        context.agree_preemption()
                    if not stop and state.global_step % args.log_every_n_steps == 0:
                        context.agree_stop()  # DDP: no per-step collective, only at logging steps
                    if stop or (state.stop_requested and self.stop_now()):  # the call only when asked
                        complete = total is not None and state.batches_done >= total
                        if complete:
                            if total == length and not combined:  # leave the loader as the uninterrupted run's loop does
                                context.data_order.finish_epoch(iterator)
                        elif not stop and not validated and not context.preempted and validating \
                                and schedule.epoch_validates(state.epoch):
                            self.validate()  # a requested stop (should_stop) validates once more, as Lightning
                        return complete
            if batch_idx + 1 > state.batches_done:  # the loader ended inside a window (len() overstated it)
                optimization.end_window(batch_idx + 1)
            elif total is not None and total == length and not combined:
                # The whole loader: ask once past its end, as a `for` loop over it does (a sampler's
                # last draw). A limited epoch asks for nothing beyond its last batch. A CombinedLoader
                # is not asked (Lightning's rule): asking would start a shorter loader again.
                context.data_order.finish_epoch(iterator)
            if total is None and state.epoch == 0 and state.batches_done == 0:
                raise ValueError(empty_loader_message(loader))
            if total is None and state.batches_done == 0 and not self._warned_used_up and isinstance(loader, Iterator):
                self._warned_used_up = True  # what a `for` loop over it does; said once
                log.warning(
                    "Epoch %d read no batch from the training data: it is an iterator (%s), used up by an earlier "
                    "epoch, so this epoch and any later one train on nothing. Expected data that starts over each "
                    "epoch: a list, a DataLoader, or an object whose __iter__ returns a new iterator (not a "
                    "generator); or one epoch with max_steps.", state.epoch, type(loader).__name__)
            return True


def warn_eval_modules(module: Any) -> None:
    """Lightning's warning when training starts with submodules in eval mode: the Trainer does not
    call `.train()` (a teacher or a frozen backbone put in eval mode stays so), so say it once."""
    modes = {name: sub.training for name, sub in module.named_modules()}
    names = [name for name, training in modes.items() if not training]
    if names:  # named: the outermost ones (whose parent trains), the root by its class
        outer = [name or type(module).__name__ for name in names if name == "" or modes[name.rpartition(".")[0]]]
        shown = ", ".join(outer[:5]) + (f" and {len(outer) - 5} more" if len(outer) > 5 else "")
        warnings.warn(
            f"Found {len(names)} module(s) in eval mode at the start of training ({shown}): they train in eval "
            "mode (dropout off, batch-norm statistics frozen), as in Lightning. If that is not intended, call "
            ".train() on the module before fit.", UserWarning, stacklevel=2)


def _skips_rest(returned: Any) -> bool:
    """Lightning's rule: `on_train_batch_start` returning -1 skips the rest of the epoch."""
    return isinstance(returned, int) and not isinstance(returned, bool) and returned == -1
