"""Where a training step's time goes, per rank: the clock behind `callbacks.StepTimeBreakdown`.

A step is cut into contiguous spans, each named after the phase it measures, so the phases of
a step add up to the step's time by construction:

    input_wait        the loader's `next()` (a DataLoader's workers, its collate_fn)
    transfer          the batch moved to the device (the module's transfer hooks included)
    forward_backward  training_step and the backward pass, up to this rank's last gradient
    collective_wait   DDP only: from this rank's last gradient to the end of backward, the
                      time it waits for the gradient all-reduce to finish (other ranks included)
    optimizer         the non-finite guard, clipping, the optimizer step, step-interval schedulers
    other             the rest: zero_grad, other callbacks' hooks, logging, the loop's own work

On a CPU each mark is `time.perf_counter()`. On a GPU it is a CUDA event recorded on the
current stream: the spans are device time (how long the device spent on a phase, or sat idle
waiting for it), and they are read only when `flush` is called, at logging steps, where one
wait for the newest event replaces a synchronisation per step.

The loop asks for the clock once per epoch (`timed`, `timed_mover`); with no clock it makes
no call at all.

Example:
    >>> clock = StepClock(warmup_steps=0)
    >>> clock.mark("other"); clock.mark("input_wait"); clock.close_step()
    >>> totals, steps = clock.flush()
    >>> steps, sorted(totals) == sorted(PHASES + ("step",))
    (1, True)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Union

import torch

from trainer._utils import move_to_device

__all__ = ["PHASES", "PHASE_NAMES", "StepClock", "clock_of", "diagnose"]

PHASES: tuple[str, ...] = ("input_wait", "transfer", "forward_backward", "collective_wait", "optimizer", "other")
PHASE_NAMES = {
    "input_wait": "input wait", "transfer": "host-to-device copy", "forward_backward": "forward+backward",
    "collective_wait": "collective wait", "optimizer": "optimizer step", "other": "other work",
}
# A rank whose phase exceeds the other ranks' median by this share of the step is a straggler.
STRAGGLER_SHARE = 0.2

Stamp = Union[float, "torch.cuda.Event"]


class StepClock:
    """Marks at phase boundaries; the spans between them, summed per phase over counted steps.

    `warmup_steps` first steps are not counted (the compile, the workers' start, the allocator's
    first growth); `device`: a CUDA device records events instead of reading the host's clock.
    """

    def __init__(self, device: torch.device | None = None, warmup_steps: int = 1) -> None:
        self.reset(device, warmup_steps)

    def reset(self, device: torch.device | None, warmup_steps: int) -> None:
        """Start over (a new fit), on `device`."""
        self.events = device is not None and device.type == "cuda"
        self.warmup_steps = warmup_steps
        self.steps_seen = 0
        self.last: Stamp | None = None
        self.ready: Stamp | None = None  # this rank's last gradient of the backward running now
        self.step_spans: list[tuple[str, Stamp, Stamp]] = []
        self.period: list[tuple[str, Stamp, Stamp]] = []  # counted steps' spans since the last flush
        self.period_steps = 0
        self.spare: list[Any] = []  # CUDA events to record again

    # ------------------------------------------------------------------------ marking
    def _now(self) -> Stamp:
        if not self.events:
            return time.perf_counter()
        event = self.spare.pop() if self.spare else torch.cuda.Event(enable_timing=True)
        event.record()
        return event  # type: ignore[no-any-return]

    def mark(self, label: str) -> None:
        """End the running span, naming it `label`, and start the next one."""
        now = self._now()
        if self.last is not None:
            self.step_spans.append((label, self.last, now))
        self.last = now

    def mark_ready(self) -> None:
        """A gradient was accumulated (a parameter hook, under DDP): the newest one ends this
        rank's own backward work; what follows until `mark_backward_end` waits for the all-reduce."""
        if not self.events:
            self.ready = time.perf_counter()
            return
        if self.ready is None:
            self.ready = self.spare.pop() if self.spare else torch.cuda.Event(enable_timing=True)
        self.ready.record()  # type: ignore[union-attr]  # recorded again: the newest gradient wins

    def mark_backward_end(self) -> None:
        """After a backward: forward+backward up to the last gradient, then the collective wait."""
        ready, self.ready = self.ready, None
        if ready is not None and self.last is not None:
            self.step_spans.append(("forward_backward", self.last, ready))
            self.last = ready
            self.mark("collective_wait")
        else:
            self.mark("forward_backward")

    def skip(self) -> None:
        """Start again from now without counting what came before (validation, this clock's flush)."""
        self.last = self._now()

    def close_step(self) -> None:
        """The step ended: its spans join the period's, unless it is a warm-up step."""
        self.mark("other")
        self.steps_seen += 1
        spans, self.step_spans = self.step_spans, []
        if self.steps_seen > self.warmup_steps:
            self.period.extend(spans)
            self.period_steps += 1
        else:
            self._recycle(spans)

    def _recycle(self, spans: list[tuple[str, Stamp, Stamp]]) -> None:
        if self.events:
            keep = {id(self.last), id(self.ready)} | {id(s) for _, start, end in self.step_spans for s in (start, end)}
            seen: set[int] = set()
            for _, start, end in spans:
                for stamp in (start, end):
                    if id(stamp) not in keep and id(stamp) not in seen:
                        seen.add(id(stamp))
                        self.spare.append(stamp)

    def flush(self) -> tuple[dict[str, float], int]:
        """The period's seconds per phase (and `step`, their sum) and its number of steps; a new
        period starts. On a GPU this waits for the newest event: call it at logging steps only."""
        totals = dict.fromkeys(PHASES, 0.0)
        if self.events and self.period:
            self.period[-1][2].synchronize()  # type: ignore[union-attr]
        for label, start, end in self.period:
            if self.events:
                totals[label] += start.elapsed_time(end) / 1000.0  # type: ignore[union-attr,arg-type]
            else:
                totals[label] += end - start  # type: ignore[operator]
        totals["step"] = sum(totals[phase] for phase in PHASES)
        steps, self.period_steps = self.period_steps, 0
        self._recycle(self.period)
        self.period = []
        return totals, steps

    # ------------------------------------------------------------ the loop's wrappers
    def timed(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The epoch's batches, each `next()` timed as input wait."""
        iterator = iter(batches)
        mark = self.mark
        while True:
            mark("other")
            try:
                batch = next(iterator)
            except StopIteration:
                return
            mark("input_wait")
            yield batch

    def timed_mover(self, mover: Callable[[Any], Any] | None, device: torch.device) -> Callable[[Any], Any]:
        """The loop's batch transfer (the module's hooks, or the plain move), timed as transfer."""
        mark = self.mark

        def move(batch: Any) -> Any:
            mark("other")
            moved = move_to_device(batch, device) if mover is None else mover(batch)
            mark("transfer")
            return moved

        return move


def clock_of(callbacks: Iterable[Any]) -> StepClock | None:
    """The clock a callback offers the loop (`step_clock`, as `callbacks.StepTimeBreakdown`), if any."""
    for callback in callbacks:
        clock = getattr(callback, "step_clock", None)
        if isinstance(clock, StepClock):
            return clock
    return None


def diagnose(per_rank: list[dict[str, float]]) -> str:
    """One sentence naming the bottleneck, from each rank's seconds per step by phase.

    With several ranks, a rank whose own phase (anything but the collective wait, which is
    where the others wait for it) exceeds the other ranks' median by more than a fifth of the
    step is named first: "input-bound on rank 1", "rank 1 is a straggler in forward+backward".
    Otherwise the largest phase on average names it: "collective wait dominates",
    "input-bound", "compute-bound", ...

    Example:
        >>> fast = dict.fromkeys(PHASES, 0.0) | {"forward_backward": 0.01, "collective_wait": 0.3, "step": 0.31}
        >>> slow = dict.fromkeys(PHASES, 0.0) | {"forward_backward": 0.01, "input_wait": 0.3, "step": 0.31}
        >>> diagnose([fast, slow]).split(":")[0]
        'input-bound on rank 1'
    """
    step = statistics.fmean(rank["step"] for rank in per_rank)
    if step <= 0:
        return "no step was timed"
    share = {phase: statistics.fmean(rank[phase] for rank in per_rank) / step for phase in PHASES}
    if len(per_rank) > 1:
        excess, phase, slow = max(
            (rank[p] - statistics.median(other[p] for j, other in enumerate(per_rank) if j != r), p, r)
            for r, rank in enumerate(per_rank) for p in PHASES if p != "collective_wait"
        )
        if excess > STRAGGLER_SHARE * step:
            what = (f"its {PHASE_NAMES[phase]} takes {per_rank[slow][phase] * 1e3:.1f} ms per step, "
                    f"{excess * 1e3:.1f} ms more than the other ranks', and they wait for it in the gradient all-reduce")
            if phase == "input_wait":
                return f"input-bound on rank {slow}: {what} (a slow loader or collate_fn on that rank)"
            return f"rank {slow} is a straggler in {PHASE_NAMES[phase]}: {what}"
    top = max(PHASES, key=lambda p: share[p])
    every = " on every rank" if len(per_rank) > 1 else ""
    percent = f"{share[top]:.0%} of the {step * 1e3:.1f} ms step"
    verdicts = {
        "collective_wait": f"collective wait dominates: the gradient all-reduce takes {percent}"
                           " (communication-bound: bigger batches per step, or accumulation, amortise it)",
        "input_wait": f"input-bound{every}: waiting for the loader takes {percent} (more workers, pin_memory, lighter collate)",
        "transfer": f"host-to-device copy dominates{every}: {percent} (pin_memory=True, smaller batches on the host)",
        "forward_backward": f"compute-bound{every}: forward+backward takes {percent}",
        "optimizer": f"the optimizer step dominates{every}: {percent} (a fused or foreach optimizer)",
        "other": f"other work dominates{every}: {percent} outside the measured phases (callbacks, logging)",
    }
    return verdicts[top]
