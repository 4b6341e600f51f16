"""What a checkpoint dict holds: its format marker, the error every check raises, the check that a
loaded dict has what a resume reads, and the conversion of a state to plain data before a save.

The file layer (`format.py`) writes and reads these dicts; the layout is in docs/checkpoints.md.

Example:
    >>> from trainer.checkpoint.schema import FORMAT, CheckpointError, check_layout
    >>> try:
    ...     check_layout({"format": FORMAT})
    ... except CheckpointError as error:
    ...     print(str(error).split(":")[0])
    Checkpoint '<in memory>' has the trainer's format marker but is incomplete
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import torch

__all__ = ["FORMAT", "FORMAT_VERSION", "CheckpointError", "check_layout", "plain_state"]

FORMAT = "loopwright.checkpoint"
FORMAT_VERSION = 3  # 3: Lightning's keys too; 2: lists of optimizers and schedulers with their classes (both still read)


class CheckpointError(ValueError):
    """A checkpoint file is missing, damaged, foreign or does not fit the run."""


def _corrupt(name: str, detail: str) -> CheckpointError:
    return CheckpointError(
        f"Checkpoint {name} is truncated or corrupt and can't be read ({detail}). Use an earlier "
        "checkpoint; an interrupted save never replaces a good file, so the previous one is "
        "still beside it if it existed."
    )


# What restore_state reads, with the type each entry must have (checked before anything is touched).
_REQUIRED: dict[str, type | tuple[type, ...]] = {"module": dict, "loop": dict, "precision": dict, "rng": list}
_LOOP_KEYS = ("epoch", "global_step", "batches_done")


def check_layout(state: dict[str, Any], *, weights_only: bool = False) -> None:
    """Raise `CheckpointError` naming the file when a loaded checkpoint lacks what a resume
    (or, with `weights_only`, an evaluation) reads; called before anything is touched."""
    name = repr(state.get("_path", "<in memory>"))
    problems = []
    for key, kind in _REQUIRED.items():
        if weights_only and key != "module":
            continue
        if key not in state:
            problems.append(f"no {key!r} entry")
        elif not isinstance(state[key], kind):
            problems.append(f"{key!r} is a {type(state[key]).__name__}")
    if isinstance(state.get("rng"), list) and not state["rng"]:
        problems.append("'rng' is empty (no process's random state)")
    if isinstance(state.get("loop"), dict):
        missing = [k for k in _LOOP_KEYS if not isinstance(state["loop"].get(k), int)]
        if missing:
            problems.append(f"'loop' lacks {', '.join(missing)}")
    if isinstance(state.get("precision"), dict) and not {"name", "state"} <= set(state["precision"]):
        problems.append("'precision' lacks name/state")
    if problems and state.get("weights_only") is True:
        raise CheckpointError(
            f"Checkpoint {name} holds the model's weights only (ModelCheckpoint(save_weights_only=True)), "
            "so a run can't resume from it. Expected a full checkpoint (last.ckpt, or one saved without "
            "save_weights_only); to evaluate these weights use trainer.validate/test(..., ckpt_path=path)."
        )
    if problems:
        raise CheckpointError(
            f"Checkpoint {name} has the trainer's format marker but is incomplete: {'; '.join(problems)}. "
            "Expected a file written whole by Trainer.save_checkpoint; use another checkpoint."
        )


_TEXT_LEAVES = (bool, int, float, str, torch.dtype, torch.device)  # what torch.load(weights_only=True) rebuilds as given
_PLAIN_LEAVES = (bool, int, float, complex, str, bytes, type(None), torch.Tensor, torch.dtype, torch.device, torch.Size)


def plain_state(
    value: Any, target: Any = None, where: str = "checkpoint", _seen: dict[int, Any] | None = None, *, as_text: bool = False
) -> Any:
    """`value` with NumPy scalars and arrays turned into Python numbers and tensors, so the
    file loads with `torch.load(weights_only=True)`; anything else that is not plain data
    fails the save at once, naming the entry (a checkpoint that can't be loaded back is
    worse than no checkpoint). A dict or list met twice (Lightning's `state_dict` is our
    `module`) stays one object, which the file stores once.

    With `as_text=True`, for what describes a run (its arguments, hyperparameters, a YAML
    run's config), nothing fails: mappings get text keys, lists and tuples stay lists and
    tuples (a module rebuilt from its hyperparameters gets the tuple it was given), and
    anything but None, a bool, a number, a string, a `torch.dtype` or a `torch.device` is kept
    as its text.

    Example:
        >>> import numpy as np
        >>> plain_state({"lr": np.float64(0.5), "steps": [np.int64(3)]})
        {'lr': 0.5, 'steps': [3]}
        >>> from pathlib import Path
        >>> plain_state({"root_dir": Path("runs"), "betas": (0.9, 0.99)}, as_text=True)
        {'root_dir': 'runs', 'betas': (0.9, 0.99)}
    """
    if as_text:
        if isinstance(value, dict):
            return {str(key): plain_state(item, as_text=True) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            texts = [plain_state(item, as_text=True) for item in value]
            if isinstance(value, list):
                return texts
            return torch.Size(texts) if isinstance(value, torch.Size) else tuple(texts)  # a named tuple: a plain one
        if type(value) is not float and isinstance(value, float):  # a float subclass (a metric's value): plain
            return float(value)
        return value if value is None or isinstance(value, _TEXT_LEAVES) else str(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):  # before the leaves: np.float64 is a float
        return value.item()
    if isinstance(value, _PLAIN_LEAVES):
        # A float subclass (a metric's `MetricValue`) is stored as a float: weights_only loads no class.
        return float(value) if type(value) is not float and isinstance(value, float) else value
    if not isinstance(value, (dict, list, tuple)):
        if numpy is not None and isinstance(value, numpy.ndarray):
            return torch.from_numpy(value.copy())
        raise CheckpointError(
            f"Can't write checkpoint {str(target)!r}: {where} is a {type(value).__module__}.{type(value).__qualname__}, "
            "which torch.load(weights_only=True) would refuse, so the file could never be loaded. Expected "
            "tensors, numbers, strings, lists and dicts: convert it (e.g. float(x), x.tolist()) in the "
            "state_dict or on_save_checkpoint that adds it."
        )
    seen = {} if _seen is None else _seen
    if id(value) in seen:
        return seen[id(value)]
    result: Any
    if isinstance(value, dict):
        items = {key: plain_state(item, target, f"{where}[{key!r}]", seen) for key, item in value.items()}
        result = collections.OrderedDict(items) if isinstance(value, collections.OrderedDict) else items
    else:
        items_list = [plain_state(item, target, f"{where}[{index}]", seen) for index, item in enumerate(value)]
        result = items_list if isinstance(value, list) else tuple(items_list)
    seen[id(value)] = result
    return result
