"""The likely causes of an inexact resume, read from the user's loader objects.

The Trainer restores what decides an epoch's order when its iterator is made (torch's
generator, the loader's and sampler's `torch.Generator`s, `set_epoch` on the loader's
`sampler` and `batch_sampler.sampler`), every global random stream at the cut, and the
position of a loader with `state_dict`. What it cannot see is state the user's own objects
keep: that is what these causes name.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch.utils.data import IterableDataset
from torch.utils.data.distributed import DistributedSampler

from trainer.checks.state import owned_objects

__all__ = ["likely_causes", "repeated_epochs", "weight_causes"]


def _reachable_samplers(loader: Any) -> set[int]:
    """The samplers the Trainer tells the epoch (`set_epoch`)."""
    sampler = getattr(loader, "sampler", None)
    inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    return {id(s) for s in (sampler, inner) if s is not None}


def _source_draws(obj: Any, method: str) -> str | None:
    """Which global generator `obj`'s `method` source draws from, when it plainly does."""
    function = getattr(type(obj), method, None)
    if function is None or getattr(function, "__module__", "").startswith("torch."):
        return None
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    if "np.random." in source or "numpy.random." in source:
        return "NumPy's random"
    if "random." in source and "torch.random" not in source or "shuffle(" in source:
        return "Python's random"
    return None


def likely_causes(loader: Any, changed: list[str], *, before_any_resume: bool) -> list[str]:
    """Causes of a batch that differs, most specific first."""
    if isinstance(loader, (list, tuple)) or callable(loader) and not hasattr(loader, "__iter__"):
        objects: list[tuple[str, Any]] = []
    else:
        objects = list(owned_objects(loader))
    reachable = _reachable_samplers(loader)
    causes: list[str] = []
    if before_any_resume:
        causes.append(
            "the same start gives other batches: the pipeline draws randomness that no seed fixes (an unseeded "
            "np.random.default_rng() or random.Random(), time, os.urandom), or a previous run left state in objects "
            "the loader shares (a global list, a cache). Seed every generator your data uses from torch's "
            "(Trainer(seed=...) seeds torch, Python and NumPy)"
        )
    for path, obj in objects:
        if isinstance(obj, DistributedSampler) and id(obj) not in reachable:
            causes.append(
                f"a DistributedSampler at the loader's {path}, where the Trainer cannot tell it the epoch (it calls "
                "set_epoch on the loader's sampler and batch_sampler.sampler): its order comes from the epoch your "
                "code sets, which a resumed process does not get back. Pass it as DataLoader(sampler=...) or as the "
                "`sampler` attribute of your batch sampler, or forward set_epoch(epoch) to it"
            )
    hidden = [c for c in changed if not c.startswith("DistributedSampler.epoch")]
    if hidden:
        causes.append(
            f"state your loader's objects keep and the checkpoint does not hold changed during the run: "
            f"{', '.join(hidden[:4])}. A resumed process starts it as it was built, so the order (or the samples) after "
            "a resume differ, e.g. an iterator that reshuffles on each iter() or counts its own epochs. Derive it from "
            "set_epoch(epoch) and torch's generator, or give the object state_dict()/load_state_dict() and use "
            "torchdata's StatefulDataLoader"
        )
    for path, obj in objects:  # a sampler drawing while it is read: a resume replays only the epoch start's streams
        drawn = _source_draws(obj, "__iter__") if "dataset" not in path and type(obj).__module__.split(".")[0] != "torch" else None
        if drawn is not None:
            causes.append(
                f"{type(obj).__name__}.__iter__ (the loader's {path}) draws from {drawn}: a resume makes the epoch's "
                "iterator again from that stream as it was when the epoch started, but draws made while the epoch is "
                "read (a generator's yields) come, after the resume, from the stream as the cut left it. Draw from a "
                "torch.Generator (the sampler's own `generator` attribute, or seeded from the epoch), as torch's "
                "RandomSampler does"
            )
    if getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0:
        causes.append(
            "persistent_workers=True: a resumed process starts new workers, whose random streams differ from those "
            "the uninterrupted run's workers had reached. Use persistent_workers=False or a StatefulDataLoader"
        )
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, IterableDataset) and not callable(getattr(dataset, "state_dict", None)):
        causes.append(
            f"the IterableDataset {type(dataset).__name__} has no state_dict(): the Trainer replays its epoch by "
            "reading it again, so its order must depend only on torch's generator and the epoch"
        )
    if not causes:
        causes.append(
            "state outside what the Trainer saves decides the batches: an object of your data pipeline that keeps "
            "state between epochs without state_dict()/load_state_dict(), or randomness outside torch's generators"
        )
    return causes


def repeated_epochs(records: list[tuple[int, int, str]], loader: Any) -> list[str]:
    """A shuffling DistributedSampler the Trainer cannot reach, and two whole epochs of the
    straight run in the same order: its epoch is never set (exact on resume, but never reshuffled)."""
    if isinstance(loader, (list, tuple)) or not hasattr(loader, "__iter__"):
        return []
    reachable = _reachable_samplers(loader)
    hidden = [path for path, obj in owned_objects(loader)
              if isinstance(obj, DistributedSampler) and obj.shuffle and id(obj) not in reachable]
    epochs: dict[int, list[str]] = {}
    for epoch, _, digest in records:
        epochs.setdefault(epoch, []).append(digest)
    whole = [epochs[e] for e in sorted(epochs)[:-1]]  # the last may be cut short by max_steps
    if not hidden or len(whole) < 2 or whole[0] != whole[1]:
        return []
    return [f"epochs 0 and 1 gave the same batches in the same order, and the shuffling DistributedSampler at the "
            f"loader's {hidden[0]} is out of the Trainer's reach: nothing calls its set_epoch, so every epoch repeats "
            "the first one's order. Pass it as DataLoader(sampler=...) or as your batch sampler's `sampler` attribute"]


def weight_causes(part: str) -> list[str]:
    """Causes of end states that differ although every batch was the same."""
    if part == "weights":
        return [
            "training_step (or a hook) uses state the checkpoint does not hold: randomness outside torch's "
            "generators (Python's random, NumPy) drawn in the step, an attribute of the module that is not a "
            "parameter or buffer (register it as a buffer, or save it in on_save_checkpoint), or a callback that "
            "changes the weights and has no state_dict()",
        ]
    return [
        f"the {part} state after the resume differs: an optimizer, scheduler or callback whose state is not in the "
        "checkpoint (a callback without state_dict(), an optimizer made outside configure_optimizers)",
    ]
