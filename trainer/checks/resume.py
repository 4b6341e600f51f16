"""`check_resume`: does this pipeline resume exactly? Train it straight, then again with
interruptions and resumes, and compare what each `training_step` received, the weights and
the optimizer state.

    straight:     fresh module, loaders as at the start  -> steps optimizer steps
    interrupted:  fresh module, loaders as at the start  -> stop requested at cut 1, checkpoint
                  new module, scrambled random streams   -> resume, stop at cut 2, checkpoint
                  ...                                    -> resume, run to the same step count

Every run gets a temporary folder, no logger and no checkpoints of its own; the random
streams and the loader objects' own state are put back when the check ends (state.py).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.callback import Callback
from trainer.checks.causes import likely_causes, repeated_epochs, weight_causes
from trainer.checks.compare import fingerprint, first_difference
from trainer.checks.state import LoaderState, RandomStreams, scramble

if TYPE_CHECKING:
    from trainer.trainer import Trainer

__all__ = ["ResumeReport", "check_resume"]

#: Trainer arguments the check sets itself: it writes nothing and decides how long each run is.
OWNED = {"root_dir": None, "logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
         "enable_model_summary": False, "max_epochs": None, "max_time": None, "log_every_n_steps": 1}
#: Seeds of the scrambled random streams each resumed run starts from (a new process's).
_SCRAMBLE = 0x5EED


@dataclasses.dataclass
class ResumeReport:
    """What `check_resume` found. `exact` is True when every batch, the weights and the
    optimizer state of the interrupted runs equal those of the straight run.

    Attributes:
        exact: the verdict.
        steps: optimizer steps of each comparison.
        cuts: `(epoch, batch_idx)` of the last batch before each interruption.
        first_bad_batch: `(epoch, batch_idx)` of the first batch that differs, or None.
        first_bad_tensor: the first weight or optimizer-state entry that differs, or None.
        causes: the likely causes, most likely first.
        rank: the process whose runs differ first (under several processes), else None.
    """

    exact: bool
    steps: int
    cuts: list[tuple[int, int]]
    first_bad_batch: tuple[int, int] | None = None
    first_bad_tensor: str | None = None
    causes: list[str] = dataclasses.field(default_factory=list)
    rank: int | None = None
    detail: str = ""
    batch_index: int | None = None  # the first differing micro-batch, counted from the start
    notes: list[str] = dataclasses.field(default_factory=list)  # found on the way, whatever the verdict

    def __str__(self) -> str:
        where = ", ".join(f"epoch {e} batch {b}" for e, b in self.cuts)
        head = f"resume check over {self.steps} steps, interrupted after {where}: "
        notes = [f"  note: {note}" for note in self.notes]
        if self.exact:
            return "\n".join([head + "exact (the same batches, weights and optimizer state).", *notes])
        lines = [head + "NOT exact.", f"  {self.detail}"]
        lines += [f"  likely cause: {cause}" for cause in self.causes]
        return "\n".join(lines + notes)


class _Recorder(Callback):
    """Records each batch `training_step` receives; requests a stop after micro-batch `stop_at`
    (counted over all the runs of a comparison: the Trainer stops at that window's end)."""

    def __init__(self, records: list[tuple[int, int, str]], stop_at: int | None) -> None:
        self.records, self.stop_at = records, stop_at

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self.records.append((trainer.current_epoch, batch_idx, fingerprint(batch)))

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.stop_at is not None and len(self.records) >= self.stop_at:
            trainer.should_stop = True


@dataclasses.dataclass
class _Outcome:
    records: list[tuple[int, int, str]]
    state: dict[str, Any]
    ends: list[int]  # the number of records at the end of each run
    loader: Any = None  # the (last) run's loader
    changed: list[str] = dataclasses.field(default_factory=list)  # what the run changed in its loader's objects


def _no_resume_notes(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Resumed from")


def _factory(module: Any) -> Callable[[], Any]:
    if isinstance(module, torch.nn.Module):
        initial = copy.deepcopy(module)  # the user's own object is never trained
        return lambda: copy.deepcopy(initial)
    if callable(module):
        return module  # type: ignore[no-any-return]
    raise TypeError(f"check_resume expected a Module or a function returning a new one. Received: {type(module).__name__}.")


def _perturb(model: torch.nn.Module) -> None:
    """Move every floating tensor of the state dict (what a checkpoint restores) elsewhere: a
    resumed run whose module starts from the same weights as the straight run's would hide an
    entry the checkpoint misses."""
    generator = torch.Generator().manual_seed(_SCRAMBLE)
    with torch.no_grad():
        for value in model.state_dict().values():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                value.add_(torch.randn(value.shape, generator=generator, dtype=value.dtype).to(value.device))


def _is_factory(loaders: Any) -> bool:
    return callable(loaders) and not hasattr(loaders, "__iter__")


def check_resume(
    module: Any,
    train_dataloaders: Any,
    *,
    steps: int = 8,
    interrupt_at: Sequence[int] | None = None,
    **trainer_args: Any,
) -> ResumeReport:
    """Train `module` on `train_dataloaders` for `steps` optimizer steps straight, and again
    with interruptions and resumes from checkpoints; report whether both runs saw the same
    batches and ended with the same weights and optimizer state.

    Args:
        module: a `Module` (its state now is the start of every run; it is not trained
            itself) or a function returning a new one (`MyModel` or `lambda: MyModel(...)`).
        train_dataloaders: the training loader, or a function returning a new one for each run.
            A loader object is reused: what its dataset and samplers keep in themselves (an
            epoch counter, an index list, a generator of their own) is put back before every
            run, as a new process would build it.
        steps: optimizer steps of each comparison.
        interrupt_at: micro-batch counts (from the start, increasing) after which a stop is
            requested; one inside an accumulation window stops at that window's end. Default:
            inside an accumulation window of an epoch (the second one when there are enough
            steps), and a second time within the same epoch.
        **trainer_args: the `Trainer` arguments of your run (precision,
            accumulate_grad_batches, gradient_clip_val, seed, callbacks, ...). The check sets
            its own root_dir (a temporary folder), logger=False, enable_checkpointing=False,
            no progress bar and max_steps=steps.

    Returns:
        a `ResumeReport`; `print(report)` says "exact" or names the first batch or tensor that
        differs and the likely causes. Every random stream is as it was before the call.
    """
    from trainer.trainer import Trainer

    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 2:
        raise ValueError(f"check_resume(steps={steps!r}): expected an int of at least 2 (optimizer steps to compare).")
    devices = trainer_args.get("devices", 1)
    if devices not in (1, "1", "auto", None) and "WORLD_SIZE" not in os.environ:
        raise ValueError(
            f"check_resume(devices={devices!r}): the check would start processes from inside itself. Expected "
            "devices=1 here; to check under several processes, start your script with torchrun "
            "(torchrun --nproc_per_node=2 check.py) and call check_resume in every process."
        )
    make_module = _factory(module)
    if callable(getattr(train_dataloaders, "train_dataloader", None)):  # a DataModule: a new loader per run
        train_dataloaders = train_dataloaders.train_dataloader
    streams = RandomStreams()
    kept = None if _is_factory(train_dataloaders) else LoaderState(train_dataloaders)
    # objects among the arguments (a precision with its GradScaler, callbacks, a strategy) keep
    # state: every run gets a copy of them as they are now
    pristine = copy.deepcopy({**trainer_args, **OWNED, "max_steps": steps})
    arguments = pristine
    scratch = own = Path(tempfile.mkdtemp(prefix="trainer-check-resume-"))
    quiet = logging.getLogger("trainer")
    quiet.addFilter(_no_resume_notes)  # no "Resumed from ..." per run: the report speaks
    try:
        def run(outcome: _Outcome, stop_at: int | None, ckpt_in: Path | None, ckpt_out: Path | None) -> None:
            if kept is not None:
                kept.restore()  # the loader objects as a new process builds them
            loader = train_dataloaders() if kept is None else train_dataloaders
            built = LoaderState(loader) if kept is None else kept
            model = make_module()
            if ckpt_in is not None:
                _perturb(model)  # whatever the checkpoint does not restore shows
            recorder = _Recorder(outcome.records, stop_at)
            fresh = copy.deepcopy(pristine)
            callbacks = list(fresh.pop("callbacks", None) or [])
            trainer = Trainer(**{**fresh, "root_dir": scratch, "callbacks": [*callbacks, recorder]})
            trainer.fit(model, loader, ckpt_path=ckpt_in)
            outcome.ends.append(len(outcome.records))
            outcome.loader, outcome.changed = loader, built.changed()
            if ckpt_out is not None:
                trainer.save_checkpoint(ckpt_out)
            else:
                outcome.state = _final_state(trainer, model)

        streams.restore()
        straight = _Outcome([], {}, [])
        run(straight, None, None, None)
        scratch = _shared(scratch)  # under several processes: the group exists now
        k = int(arguments.get("accumulate_grad_batches") or 1)
        stops = list(interrupt_at) if interrupt_at is not None else _default_stops(straight.records, k)
        _check_stops(stops, len(straight.records))
        streams.restore()
        interrupted = _Outcome([], {}, [])
        checkpoint: Path | None = None
        for index, stop in enumerate([*stops, None]):
            saved = scratch / f"cut{index}.ckpt" if stop is not None else None
            run(interrupted, stop, checkpoint, saved)
            checkpoint = saved
            scramble(_SCRAMBLE + index)  # the next run starts in a new process's random state
        report = _compare(straight, interrupted, steps, straight.loader, straight.changed)
        report = _across_ranks(report)
        _meet()  # every rank has read the checkpoints before rank 0 removes them
        return report
    finally:
        quiet.removeFilter(_no_resume_notes)
        streams.restore()
        if kept is not None:
            kept.restore()
        if scratch == own:  # rank 0's folder (or this process's alone): the others' were removed when shared
            shutil.rmtree(scratch, ignore_errors=True)


def _shared(scratch: Path) -> Path:
    """Under several processes, rank 0's folder (it writes the checkpoints every rank reads)."""
    from torch import distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return scratch
    chosen = [str(scratch)]
    dist.broadcast_object_list(chosen, src=0)
    if dist.get_rank() != 0:
        shutil.rmtree(scratch, ignore_errors=True)
    return Path(chosen[0])


def _meet() -> None:
    from torch import distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _default_stops(records: list[tuple[int, int, str]], k: int) -> list[int]:
    """Two stops inside one epoch (its second if the run has one with room), the first inside
    an accumulation window: the micro-batch counts to request them after."""
    windows: list[tuple[int, int, int]] = []  # (epoch, first count, last count), counts from 1
    index = 0
    while index < len(records):
        epoch, end = records[index][0], index
        while end < len(records) and records[end][0] == epoch and end - index < k:
            end += 1
        windows.append((epoch, index + 1, end))
        index = end
    by_epoch: dict[int, list[tuple[int, int, int]]] = {}
    for window in windows:
        by_epoch.setdefault(window[0], []).append(window)
    complete = [e for e in by_epoch if e + 1 in by_epoch or len(by_epoch[e]) >= 3]
    choices = sorted(complete or by_epoch, key=lambda e: (len(by_epoch[e]) < 3, e == 0, e))
    chosen = by_epoch[choices[0]]
    if windows[-1] in chosen:  # the run's last window: no resume is left after it
        chosen = chosen[:-1]
    if not chosen:
        raise ValueError(
            f"check_resume: {len(records)} micro-batches in {len(windows)} optimizer step(s) leave no point to "
            "interrupt. Expected steps of at least 2 (more to interrupt twice inside an epoch)."
        )
    first = chosen[0]
    stops = [first[1]]  # its first micro-batch: inside the window when k > 1 (the stop lands at its end)
    if len(chosen) >= 2:
        stops.append(chosen[1][2])
    return stops


def _check_stops(stops: list[int], total: int) -> None:
    if not stops or any(not isinstance(s, int) or isinstance(s, bool) for s in stops) or stops != sorted(set(stops)) \
            or stops[0] < 1 or stops[-1] >= total:
        raise ValueError(
            f"check_resume(interrupt_at={stops!r}): expected increasing micro-batch counts from 1 to {total - 1} "
            f"(the straight run trains on {total} micro-batches)."
        )


def _final_state(trainer: Trainer, module: torch.nn.Module) -> dict[str, Any]:
    names = {id(p): name for name, p in module.named_parameters()}
    optimizers = []
    for optimizer in trainer.optimizers:
        state = optimizer.state_dict()
        order = [p for group in optimizer.param_groups for p in group["params"]]
        named = {names.get(id(order[i]), i) if isinstance(i, int) and i < len(order) else i: v
                 for i, v in state["state"].items()}
        groups = [{key: value for key, value in group.items() if key != "params"} for group in state["param_groups"]]
        optimizers.append({"state": named, "param_groups": groups})
    scaler = getattr(trainer.precision, "scaler", None)
    return {
        "global_step": trainer.global_step,
        "weights": {name: value.detach().clone() for name, value in module.state_dict().items()},
        "optimizers": optimizers,
        "scaler": scaler.state_dict() if scaler is not None and hasattr(scaler, "state_dict") else None,
    }


def _compare(straight: _Outcome, interrupted: _Outcome, steps: int, loaders: Any, changed: list[str]) -> ResumeReport:
    cuts = [interrupted.records[end - 1][:2] for end in interrupted.ends[:-1] if end]
    report = ResumeReport(exact=True, steps=steps, cuts=[(int(e), int(b)) for e, b in cuts],
                          notes=repeated_epochs(straight.records, loaders))
    a, b = straight.records, interrupted.records
    bad = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if bad is None and len(a) != len(b):
        bad = min(len(a), len(b))
    if bad is not None:
        run = next(i for i, end in enumerate(interrupted.ends) if bad < end) if bad < len(b) else len(interrupted.ends) - 1
        position = a[bad][:2] if bad < len(a) else b[bad][:2]
        report.exact = False
        report.first_bad_batch = (int(position[0]), int(position[1]))
        report.detail = _batch_detail(a, b, bad, run, interrupted.ends)
        report.causes = likely_causes(loaders, changed, before_any_resume=run == 0)
        report.batch_index = bad
        return report
    for part in ("global_step", "weights", "optimizers", "scaler"):
        found = first_difference(part, straight.state[part], interrupted.state[part])
        if found is not None:
            report.exact = False
            report.first_bad_tensor = found
            report.detail = (f"every batch was the same, but the end states differ: {found} (first difference; "
                             "straight run vs interrupted and resumed run).")
            report.causes = weight_causes(part)
            return report
    return report


def _batch_detail(a: list[Any], b: list[Any], bad: int, run: int, ends: list[int]) -> str:
    def shown(records: list[Any]) -> str:
        if bad >= len(records):
            return "no batch (the run ended)"
        epoch, index, digest = records[bad]
        return f"epoch {epoch} batch {index} (fingerprint {digest})"

    when = "before any interruption (the two runs differ from the start)" if run == 0 else (
        f"in the run resumed after interruption {run}, "
        + ("its first batch" if bad == ends[run - 1] else f"its batch {bad - ends[run - 1] + 1}"))
    return (f"the first batch that differs is micro-batch {bad} of the run, {when}: the straight run's "
            f"training_step received {shown(a)}, the interrupted run's {shown(b)}.")


def _across_ranks(report: ResumeReport) -> ResumeReport:
    """Under several processes every rank returns the same report: the one whose runs differ
    first (by batch, then by end state), naming its rank."""
    from torch import distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return report
    reports: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, report)
    inexact = [(rank, r) for rank, r in enumerate(reports) if not r.exact]
    if not inexact:
        return report
    rank, first = min(inexact, key=lambda item: (item[1].first_bad_batch is None, item[1].batch_index or 0, item[0]))
    chosen: ResumeReport = copy.copy(first)
    chosen.rank = rank
    chosen.detail = f"on rank {rank}: {first.detail}"
    return chosen
