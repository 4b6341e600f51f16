"""Small helpers: moving batches to a device, seeding, RNG state, one-line error reports, weak
back-references."""

from __future__ import annotations

import dataclasses
import datetime
import random
import re
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

__all__ = ["is_url", "move_to_device", "to_host", "seed_everything", "rng_state", "set_rng_state", "length_of", "first_line",
           "WeakAttribute", "check_run_name", "parse_max_time", "profiler_settings", "PROFILER_KEYS"]


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a nested batch to `device`; other leaves are left alone.

    Handles tensors, lists, tuples (named tuples keep their type), dicts (and other
    mappings rebuilt as their own type when possible) and dataclass instances.
    """
    cls = type(batch)
    if cls is tuple or cls is list:  # the common case first: a plain tuple/list of tensors, in one frame
        for item in batch:
            if type(item) is not Tensor or item.device != device:
                break
        else:
            return batch  # every tensor already there: the batch itself, as a hand-written loop has it
        moved = []
        for item in batch:
            if type(item) is Tensor:
                if item.device != device:
                    item = item.to(device, non_blocking=device.type != "cpu")
            else:
                item = move_to_device(item, device)
            moved.append(item)
        return cls(moved)
    if isinstance(batch, torch.Tensor):
        # non_blocking only towards an accelerator: a non-blocking copy *to* the CPU may be
        # read before it has landed
        return batch if batch.device == device else batch.to(device, non_blocking=device.type != "cpu")
    if isinstance(batch, (list, tuple)):
        moved = [move_to_device(item, device) for item in batch]
        if hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*moved)
        return type(batch)(moved) if isinstance(batch, tuple) else moved
    if isinstance(batch, Mapping):
        items = {key: move_to_device(value, device) for key, value in batch.items()}
        try:
            return type(batch)(items)  # type: ignore[call-arg]
        except TypeError:
            return items
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {f.name: move_to_device(getattr(batch, f.name), device) for f in dataclasses.fields(batch) if f.init}
        return dataclasses.replace(batch, **changes)
    return batch


def to_host(output: Any) -> Any:
    """A copy of every tensor of a nested output in CPU memory, detached (what `predict` keeps).

    Lightning moves predictions to the CPU so the device does not fill up over a long predict;
    a copy also on the CPU, so nothing kept aliases the step's own tensors (a compiled graph's
    outputs are reused by its next replay; a module may return a buffer it changes later).
    The nesting is `move_to_device`'s.
    """
    cls = type(output)
    if cls is tuple or cls is list:
        return cls([to_host(item) for item in output])
    if isinstance(output, torch.Tensor):
        return output.detach().to("cpu", copy=True)
    if isinstance(output, (list, tuple)):
        moved = [to_host(item) for item in output]
        if hasattr(output, "_fields"):  # namedtuple
            return type(output)(*moved)
        return type(output)(moved) if isinstance(output, tuple) else moved
    if isinstance(output, Mapping):
        items = {key: to_host(value) for key, value in output.items()}
        try:
            return type(output)(items)  # type: ignore[call-arg]
        except TypeError:
            return items
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        changes = {f.name: to_host(getattr(output, f.name)) for f in dataclasses.fields(output) if f.init}
        return dataclasses.replace(output, **changes)
    return output


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python's `random`, NumPy's global generator and torch (CPU and every CUDA device);
    return the seed (Lightning's `seed_everything`).

    `seed=None` reads `PL_GLOBAL_SEED` from the environment, else 0 (with a warning), as
    Lightning does. `workers=True` sets `PL_SEED_WORKERS=1`, as Lightning's: the Trainer then
    gives every DataLoader it runs without a `worker_init_fn` of its own one that seeds torch,
    NumPy and `random` in each worker from the seed, the worker and the rank
    (`trainer.utilities.seed.pl_worker_init_function`, in trainer/loops/worker_seeds.py), so workers never repeat each other's
    augmentations and a rerun draws the same numbers, Lightning's.
    """
    import os
    import warnings

    import numpy as np  # imported when first needed: keeps `import trainer` light

    if seed is None:
        env = os.environ.get("PL_GLOBAL_SEED")
        if env is None:
            seed = 0
            warnings.warn("seed_everything(None): no seed found (PL_GLOBAL_SEED is unset), seed set to 0.", stacklevel=2)
        else:
            seed = int(env)
    seed = int(seed)
    if not 0 <= seed <= 2**32 - 1:
        raise ValueError(f"seed_everything(seed=...) expected an int in [0, 2**32 - 1] (NumPy's range). Received: {seed}.")
    os.environ["PL_GLOBAL_SEED"] = str(seed)  # Lightning's variable: processes started later see it
    os.environ["PL_SEED_WORKERS"] = str(int(workers))  # the Trainer's loaders read it (loops/worker_seeds.py)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return seed


def rng_state() -> dict[str, Any]:
    """Every global RNG state, in a form `torch.load(weights_only=True)` accepts."""
    import numpy as np

    py_version, py_state, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": {"version": py_version, "state": torch.tensor(py_state, dtype=torch.int64), "gauss": py_gauss},
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # The device this process computes on (the strategy makes it the current one), not every
        # visible GPU: a resume on a machine that sees fewer GPUs restores it all the same.
        state["cuda"] = [torch.cuda.get_rng_state(torch.cuda.current_device())]
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    import numpy as np

    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["state"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(
        (npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        _set_cuda_rng_state(list(state["cuda"]))


def _set_cuda_rng_state(states: list[torch.Tensor]) -> None:
    """The saved CUDA state onto the current device. One state: the device the saving process
    used. Several (files written before: one per GPU that process could see, even if this
    machine sees fewer): the one of the current device's index, else the first."""
    if len(states) == 1:
        torch.cuda.set_rng_state(states[0])  # the current device, applied when CUDA initialises
        return
    index = torch.cuda.current_device()
    torch.cuda.set_rng_state(states[index] if index < len(states) else states[0], index)


def length_of(loader: Any) -> int | None:
    """`len(loader)`, or None for loaders without a length (a DataLoader over an
    IterableDataset without `__len__` has `__len__` but raises TypeError; a wrapper's
    `__len__` may raise NotImplementedError, which Lightning also reads as no length)."""
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None


def first_line(error: BaseException, empty: str | None = None) -> str:
    r"""The first line of `error`'s message, for a one-line report; when it has none, `empty`
    (by default the error's type name).

    Example:
        >>> first_line(ValueError("bad value\nmore detail")), first_line(KeyError())
        ('bad value', 'KeyError')
    """
    lines = str(error).strip().splitlines()
    if lines:
        return lines[0]
    return type(error).__name__ if empty is None else empty


# ------------------------------------------------- argument forms shared by several layers
# The Trainer's argument check (`_args.py`) and the layers that use an argument parse it the
# same way, with these (pydantic is loaded only by the check).
_TIME = re.compile(r"^(\d+):(\d+):(\d+):(\d+)$")
PROFILER_KEYS = ("wait", "warmup", "active", "repeat", "record_memory", "record_shapes", "with_stack", "row_limit", "skip_first",
                 "dirpath", "filename")


def profiler_settings(value: Any) -> dict[str, Any] | None:
    """`Trainer(profiler=...)` as torch.profiler settings: None/False/"simple": no torch profiler;
    True/"pytorch": the defaults ({}); a dict: those settings (keys from `PROFILER_KEYS`)."""
    if value is None or value is False or value == "simple":
        return None
    if value is True or value == "pytorch":  # Lightning's name for torch.profiler
        return {}
    if value == "advanced":
        raise ValueError(
            "Trainer(profiler='advanced') is Lightning's cProfile report per action, which is not offered here. "
            "Expected 'simple' (the time spent in every hook and step, logged when fit ends), 'pytorch' or True "
            "(torch.profiler traces of a few optimizer steps), or a dict of torch.profiler schedule options."
        )
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(PROFILER_KEYS))
        if unknown:
            raise ValueError(
                f"Trainer(profiler=...) got unknown key(s) {unknown}. Expected some of: {', '.join(PROFILER_KEYS)}."
            )
        return dict(value)
    raise ValueError(
        f"Trainer(profiler=...) expected None, True, 'simple', 'pytorch' or a dict such as {{'active': 3}}. "
        f"Received: {value!r}."
    )


def check_run_name(value: object, where: str = "Trainer(run_name=...)") -> str | None:
    """A run name is a plain folder name (no separators, not `.`/`..`); None stays None.

    Raises:
        ValueError: anything else, saying what is accepted.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip() == value and value and Path(value).name == value and value not in (".", ".."):
        return value
    expected = "expected a plain folder name such as 'exp1' (no '/' or surrounding spaces), or None for a new version_N folder"
    if not where:  # the Trainer's argument check adds the name and what it received
        raise ValueError(expected)
    raise ValueError(f"{where} {expected}. Received: {value!r} of type {type(value).__name__}.")


def parse_max_time(value: Any) -> float | None:
    """Seconds from Lightning's forms: "DD:HH:MM:SS", a timedelta, or a dict of timedelta keys."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, dict):
        seconds = datetime.timedelta(**value).total_seconds()
    elif isinstance(value, str) and _TIME.match(value.strip()):
        days, hours, minutes, secs = (int(part) for part in _TIME.match(value.strip()).groups())  # type: ignore[union-attr]
        seconds = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=secs).total_seconds()
    else:
        raise ValueError(
            f"Trainer(max_time=...) expected 'DD:HH:MM:SS', a datetime.timedelta or a dict such as "
            f"{{'hours': 2}}. Received: {value!r} of type {type(value).__name__}."
        )
    if seconds <= 0:
        raise ValueError(f"Trainer(max_time=...) expected a positive duration. Received: {value!r}.")
    return seconds


# ----------------------------------------------------------------- weak back-references
# The run's context owns its helpers (the run's files, manual optimization) and each helper
# refers back to it; with plain attributes that is a reference cycle, which only the cyclic
# garbage collector frees, and everything the run holds (the module, the optimizer: on a GPU,
# the run's memory) waits for it. The helpers hold their owner through `WeakAttribute`
# instead, so the last reference to the Trainer frees the whole run at once.

T = TypeVar("T")


class WeakAttribute(Generic[T]):
    """An attribute that refers to its value without keeping it alive.

    Example:
        >>> class Owner: ...
        >>> class Helper:
        ...     owner: WeakAttribute[Owner] = WeakAttribute()
        ...     def __init__(self, owner: Owner) -> None:
        ...         self.owner = owner
        >>> owner = Owner(); helper = Helper(owner)
        >>> helper.owner is owner
        True

    A descriptor: `obj.name = value` keeps a weak reference; reading it after `value` is
    gone raises a RuntimeError (the owner outlived what it belongs to)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = f"_weak_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        ref = obj.__dict__.get(self.slot)
        value = ref() if ref is not None else None
        if value is None:
            raise RuntimeError(f"{type(obj).__name__}.{self.name}: the object it belonged to no longer exists.")
        return value  # type: ignore[no-any-return]

    def __set__(self, obj: Any, value: T) -> None:
        obj.__dict__[self.slot] = weakref.ref(value)


def is_url(path: Any) -> bool:
    """Whether `path` is the text of a URL of a remote file system (`s3://...`; not `file://`)."""
    if not isinstance(path, str):
        return False
    protocol, separator, _ = path.partition("://")
    return bool(separator) and protocol.isidentifier() and protocol != "file"
