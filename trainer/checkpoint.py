"""Checkpoint files: atomic writes, checked loads that never execute code, the whole state.

A checkpoint is a dict of `state_dict`s and plain data with a format marker (layout in
docs/checkpoints.md). `save_atomic` writes it to a temporary file beside the target,
flushes and fsyncs it, then `os.replace`s it over the target, so a crash at any moment
leaves the previous file intact. `load_checkpoint` checks the archive's CRC-32 sums
(a flipped byte never loads silently), then reads it with `torch.load(weights_only=True)`,
which refuses anything but tensors and plain data.

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> from trainer.checkpoint import FORMAT, FORMAT_VERSION, load_checkpoint, save_atomic
    >>> path = Path(tempfile.mkdtemp()) / "x.ckpt"
    >>> _ = save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "w": torch.ones(2)}, path)
    >>> load_checkpoint(path)["w"]
    tensor([1., 1.])
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import pickle
import re
import shutil
import sys
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from trainer._utils import rng_state, set_rng_state

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "save_atomic",
    "load_checkpoint",
    "collect_state",
    "restore_state",
    "restore_module",
    "find_last",
    "callback_keys",
    "plain_state",
    "check_layout",
    "collect_weights",
]

log = logging.getLogger("trainer")

FORMAT = "loopwright.checkpoint"
FORMAT_VERSION = 2  # 2: lists of optimizers and schedulers with their classes (1 is still read)
_TMP_SUFFIX = ".tmp"
_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(ValueError):
    """A checkpoint file is missing, damaged, foreign or does not fit the run."""


# ------------------------------------------------------------------------------ writing
def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{_TMP_SUFFIX}")


def _clear_stale_temporaries(path: Path) -> None:
    """Remove temporaries of `path` left by killed saves, never one another process is writing.

    Only names of exactly the form `_temporary_name` makes are considered (a user's
    `.NAME.notes.tmp` or another target's temporary never matches), and a temporary whose
    process is still alive is left alone (it may be mid-save).
    """
    pattern = re.compile(re.escape(f".{path.name}.") + r"(\d+)" + re.escape(_TMP_SUFFIX))
    for candidate in path.parent.iterdir():
        match = pattern.fullmatch(candidate.name)
        if match is not None and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):  # Windows: a file open for writing can't be removed
                candidate.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (our own process counts as not saving)."""
    if pid == os.getpid() or pid <= 0 or os.name == "nt":  # Windows: os.kill(pid, 0) would end it
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists but belongs to someone else, or can't tell
        return True
    return True


@contextlib.contextmanager
def _crc32_on() -> Iterator[None]:
    """torch.save writes CRC-32 sums by default; make sure, and restore the switch after."""
    get = getattr(torch.serialization, "get_crc32_options", None)
    if get is None:
        yield
        return
    previous = get()
    torch.serialization.set_crc32_options(True)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(previous)


def save_atomic(state: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write `state` to `path` so that `path` is always either the old or the new file.

    A temporary left by a save that was killed is removed by the next save to `path`.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale_temporaries(target)
    temporary = _temporary_name(target)
    try:
        with open(temporary, "wb") as handle, _crc32_on():
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, (OSError, RuntimeError)):
            raise _write_failed(target, error) from error
        raise
    _fsync_directory(target.parent)
    return target


def _write_failed(target: Path, error: BaseException) -> OSError:
    """A failed write, said plainly: which file, why (a full disk, most often), what is intact."""
    code = getattr(error, "errno", None)
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    full = code == errno.ENOSPC or "unexpected pos" in text or "file write failed" in text.lower()
    try:
        free = f"; {shutil.disk_usage(target.parent).free / 2**20:.0f} MiB free there now"
    except OSError:
        free = ""
    reason = "the disk is full" if code == errno.ENOSPC else ("the write failed, most likely a full disk" if full else "the write failed")
    return OSError(
        code or errno.EIO,
        f"Checkpoint {str(target)!r} could not be written: {reason} ({text}{free}). The previous file "
        "at that path, if any, is intact and no partial file was left. Free space or choose another "
        "root_dir / dirpath, then save again.",
    )


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows: directories can't be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ reading
def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu", *, verify: bool = True) -> dict[str, Any]:
    """Load and check a checkpoint; raise `CheckpointError` naming the file and the problem.

    Args:
        path: the checkpoint file.
        map_location: passed to `torch.load`.
        verify: check every entry's CRC-32 first (reads the file once more; on by default).
    """
    source = Path(path)
    name = repr(str(source))
    if not source.is_file():
        what = "is a directory" if source.is_dir() else "does not exist"
        raise CheckpointError(
            f"Checkpoint {name} {what}. Expected the path of a file written by "
            "Trainer.save_checkpoint (or ckpt_path='last' to resume the newest run)."
        )
    _check_archive(source, name, verify)
    try:
        state = torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"Checkpoint {name} holds objects that are not plain data or tensors, so it was refused "
            f"without running any of it ({_unsafe_detail(error)}). Only files written by "
            "Trainer.save_checkpoint can be loaded."
        ) from None
    except Exception as error:  # noqa: BLE001 - any failure to parse means a damaged file
        raise _corrupt(name, f"{type(error).__name__}: {_first_line(error)}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"Checkpoint {name} is not a checkpoint of this trainer (no {FORMAT!r} marker). "
            "Expected a file written by Trainer.save_checkpoint; to load bare weights, use "
            "module.load_state_dict(torch.load(path, weights_only=True))."
        )
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {name} has format version {version!r}, newer than this version of the "
            f"trainer reads ({FORMAT_VERSION}). Upgrade the package to load it."
        )
    state["_path"] = str(source)  # in memory only: lets later errors name the file
    return state


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


def _check_archive(source: Path, name: str, verify: bool) -> None:
    """A torch.save file is a zip archive; check it is whole before unpickling anything."""
    with open(source, "rb") as handle:
        head = handle.read(4)
    if len(head) < 4:
        raise _corrupt(name, f"the file is {source.stat().st_size} bytes long")
    if head != _ZIP_MAGIC:
        raise CheckpointError(
            f"Checkpoint {name} is not a torch.save archive (it starts with {head!r}, expected "
            f"{_ZIP_MAGIC!r}): either it is not a checkpoint or its beginning is corrupt. Expected "
            "a file written by Trainer.save_checkpoint."
        )
    try:
        with zipfile.ZipFile(source) as archive:
            if verify:
                for entry in archive.infolist():
                    if entry.CRC == 0 and entry.file_size:  # written without checksums
                        continue
                    with archive.open(entry) as member:
                        while member.read(1 << 24):  # the CRC is checked at the end of the entry
                            pass
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as error:
        raise _corrupt(name, _first_line(error)) from None


def _corrupt(name: str, detail: str) -> CheckpointError:
    return CheckpointError(
        f"Checkpoint {name} is truncated or corrupt and can't be read ({detail}). Use an earlier "
        "checkpoint; an interrupted save never replaces a good file, so the previous one is "
        "still beside it if it existed."
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _unsafe_detail(error: BaseException) -> str:
    for line in str(error).splitlines():
        if "global" in line.lower():
            return line.strip()
    return _first_line(error)


# ------------------------------------------------------------------------- trainer state
def callback_keys(callbacks: Sequence[Any]) -> list[str]:
    """Each callback's key in a checkpoint; repeated keys get `#2`, `#3`, ... in list order."""
    keys: list[str] = []
    for callback in callbacks:
        key = callback.state_key
        if key in keys:
            number = 2
            while f"{key}#{number}" in keys:
                number += 1
            key = f"{key}#{number}"
        keys.append(key)
    return keys


def cut_problem(trainer: Any) -> str | None:
    """Why the current state is not a cut at an optimizer-step boundary, or None if it is."""
    manual = getattr(trainer, "_manual", None)
    inside = manual.cut_problem() if manual is not None else None
    if inside is not None:
        return inside
    order = trainer._io.data_order
    if order.fetching:
        return (
            "it was requested while the loader was producing a batch (an interrupt inside "
            "DataLoader.__next__): the random draws for that batch are already in the saved random state"
        )
    taken = order.unconsumed(trainer.state.epoch, trainer.state.batches_done)
    accumulated = any(
        p.grad is not None for optimizer in trainer.optimizers for group in optimizer.param_groups for p in group["params"]
    )
    if not taken and not accumulated:
        return None
    step = trainer.global_step + 1
    if taken:
        detail = f"{taken} micro-batch(es) of optimizer step {step} were already taken from the loader"
    else:
        detail = f"gradients for optimizer step {step} are accumulated"
    return f"it was requested inside an accumulation window ({detail}, but that step has not run)"


def collect_state(trainer: Any, *, allow_partial: bool = False, target: Any = None) -> dict[str, Any]:
    """Everything needed to continue exactly: a dict of `state_dict`s and plain data.

    Raises:
        RuntimeError: the state is inside an accumulation window and `allow_partial` is
            False (a checkpoint must be a cut at an optimizer-step boundary).
    """
    loop = getattr(trainer, "_loop", None)
    if loop is not None and getattr(trainer, "_module", None) is not None:
        loop.reconcile(raise_now=False)  # skipped_steps exact in the file; any error waits for the loop
    problem = cut_problem(trainer)
    if problem is not None and not allow_partial:
        raise RuntimeError(
            f"Can't write checkpoint {str(target)!r}: {problem}. A checkpoint is a cut at an "
            "optimizer-step boundary, and accumulated gradients are not saved. Expected a call "
            "between steps: from Callback.on_train_batch_end of a window's last micro-batch, "
            "on_train_step_end, on_train_epoch_start/end, on_fit_end, or outside fit."
        )
    opt = trainer._opt
    module = trainer._module
    strategy = trainer.strategy
    state: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "module": module.state_dict(),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "optimizers": [
            {"class": _class_name(o), "state": o.state_dict()} for o in (opt.optimizers if opt is not None else [])
        ],
        "lr_schedulers": [
            {"class": _class_name(c.scheduler), "state": c.scheduler.state_dict()}
            for c in (opt.schedulers if opt is not None else [])
        ],
        "precision": {"name": trainer.precision.name, "state": trainer.precision.state_dict()},
        "loop": trainer.state.state_dict(),
        "rng": strategy.all_gather_object(rng_state()),
        "data": strategy.all_gather_object(trainer._io.data_order.state_dict()),
        "cut": {"clean": problem is None, "reason": problem},
        "callbacks": {
            key: cb.state_dict() for key, cb in zip(callback_keys(trainer.callbacks), trainer.callbacks)
        },
        "config": _plain(trainer.args.model_dump(exclude={"callbacks", "logger", "precision"})),
        "hparams": _plain(dict(getattr(module, "hparams", {}) or {})),
        "experiment": _plain(getattr(trainer, "experiment_config", None)),
    }
    datamodule: Any = getattr(trainer, "_datamodule", None)
    if callable(getattr(datamodule, "state_dict", None)):
        state["datamodule"] = datamodule.state_dict()
    trainer._dispatch.call("on_save_checkpoint", trainer, module, state)
    return plain_state(state, target)


_PLAIN_LEAVES = (bool, int, float, complex, str, bytes, type(None), torch.Tensor, torch.dtype, torch.device, torch.Size)


def plain_state(value: Any, target: Any = None, where: str = "checkpoint") -> Any:
    """`value` with NumPy scalars and arrays turned into Python numbers and tensors, so the
    file loads with `torch.load(weights_only=True)`; anything else that is not plain data
    fails the save at once, naming the entry (a checkpoint that can't be loaded back is
    worse than no checkpoint).

    Example:
        >>> import numpy as np
        >>> plain_state({"lr": np.float64(0.5), "steps": [np.int64(3)]})
        {'lr': 0.5, 'steps': [3]}
    """
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):  # before the leaves: np.float64 is a float
        return value.item()
    if isinstance(value, _PLAIN_LEAVES):
        return value
    if isinstance(value, dict):
        items = {key: plain_state(item, target, f"{where}[{key!r}]") for key, item in value.items()}
        return collections.OrderedDict(items) if isinstance(value, collections.OrderedDict) else items
    if isinstance(value, (list, tuple)):
        items_list = [plain_state(item, target, f"{where}[{index}]") for index, item in enumerate(value)]
        return items_list if isinstance(value, list) else tuple(items_list)
    if numpy is not None and isinstance(value, numpy.ndarray):
        return torch.from_numpy(value.copy())
    raise CheckpointError(
        f"Can't write checkpoint {str(target)!r}: {where} is a {type(value).__module__}.{type(value).__qualname__}, "
        "which torch.load(weights_only=True) would refuse, so the file could never be loaded. Expected "
        "tensors, numbers, strings, lists and dicts: convert it (e.g. float(x), x.tolist()) in the "
        "state_dict or on_save_checkpoint that adds it."
    )


def collect_weights(trainer: Any, target: Any = None) -> dict[str, Any]:
    """A weights-only checkpoint: the module's state dict with the format marker (for
    evaluation and export; it has no optimizer, loop or random state to resume from)."""
    module = trainer._module
    state = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "weights_only": True,
        "module": module.state_dict(),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "hparams": _plain(dict(getattr(module, "hparams", {}) or {})),
    }
    return plain_state(state, target)


def restore_module(module: Any, checkpoint: dict[str, Any], source: str) -> None:
    """Load the weights; on a mismatch name every missing, unexpected and mis-shaped entry."""
    saved = checkpoint["module"]
    own = module.state_dict()
    missing = sorted(set(own) - set(saved))
    unexpected = sorted(set(saved) - set(own))
    misshaped = sorted(
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(saved)
        if isinstance(saved[k], torch.Tensor) and isinstance(own[k], torch.Tensor) and saved[k].shape != own[k].shape
    )
    if missing or unexpected or misshaped:
        parts = [
            f"{label}: {', '.join(items)}"
            for label, items in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
            if items
        ]
        raise CheckpointError(
            f"{source} does not fit {type(module).__name__} (it was saved from "
            f"{checkpoint.get('module_class', 'an unknown class')}). " + "; ".join(parts) + "."
        )
    module.load_state_dict(saved)


def _source(checkpoint: dict[str, Any]) -> str:
    path = checkpoint.get("_path")
    return f"Checkpoint {path!r}" if path else "The checkpoint"


def restore_state(trainer: Any, checkpoint: dict[str, Any]) -> None:
    """Put the Trainer back exactly where `collect_state` found it."""
    source = _source(checkpoint)
    restore_module(trainer._module, checkpoint, source)
    opt = trainer._opt
    if opt is not None:
        _restore_list(source, "optimizer", opt.optimizers, _saved_list(checkpoint, "optimizer"))
        _restore_list(source, "LR scheduler", [c.scheduler for c in opt.schedulers], _saved_list(checkpoint, "lr_scheduler"))
    _restore_precision(trainer, checkpoint["precision"], source)
    trainer.state.load_state_dict(checkpoint["loop"])
    saved_callbacks = dict(checkpoint.get("callbacks", {}))
    for key, callback in zip(callback_keys(trainer.callbacks), trainer.callbacks):
        if key in saved_callbacks:
            callback.load_state_dict(saved_callbacks.pop(key))
    if saved_callbacks:
        log.info("%s holds state of callbacks this run does not have: %s.", source, ", ".join(saved_callbacks))
    rank, world_size = trainer.strategy.rank, trainer.strategy.world_size
    rngs, data = checkpoint["rng"], checkpoint.get("data") or [{}]
    if len(rngs) != world_size:
        warnings.warn(
            f"{source} was written by {len(rngs)} process(es); this run has {world_size}. Each rank "
            f"takes the random streams and data-order state of the saved rank with its number (or "
            "the last one), so the run continues, but not bit-identically to an uninterrupted run "
            "(the data is split differently and the random streams differ). Expected the same "
            "number of processes for an exact resume.",
            stacklevel=4,
        )
    datamodule: Any = getattr(trainer, "_datamodule", None)
    if checkpoint.get("datamodule") is not None and callable(getattr(datamodule, "load_state_dict", None)):
        datamodule.load_state_dict(checkpoint["datamodule"])
    trainer._io.data_order.load_state_dict(data[min(rank, len(data) - 1)])
    set_rng_state(rngs[min(rank, len(rngs) - 1)])
    cut = checkpoint.get("cut") or {}
    if cut.get("clean") is False:
        warnings.warn(
            f"{source} was not written at a clean cut "
            f"({cut.get('reason')}). Training continues from the last completed step "
            f"({trainer.global_step}) and re-reads that window's batches, but the random streams "
            "are those of the interrupt, so the result is not bit-identical to an uninterrupted run.",
            stacklevel=4,
        )
    trainer._dispatch.call("on_load_checkpoint", trainer, trainer._module, checkpoint)


def _class_name(obj: Any) -> str:
    return type(obj).__qualname__


def _saved_list(checkpoint: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The saved optimizers or schedulers as [{"class", "state"}] (format 1 held one, bare)."""
    if kind + "s" in checkpoint:
        return list(checkpoint[kind + "s"])
    single = checkpoint.get(kind)
    return [] if single is None else [{"class": None, "state": single}]


def _restore_list(source: str, what: str, targets: list[Any], saved: list[dict[str, Any]]) -> None:
    if len(saved) != len(targets):
        raise CheckpointError(
            f"{source} holds {len(saved)} {what}(s); this run's configure_optimizers returned "
            f"{len(targets)}. Expected the configure_optimizers of the saved run."
        )
    for index, (target, entry) in enumerate(zip(targets, saved)):
        label = f"{what} {index}" if len(targets) > 1 else what
        saved_class = entry.get("class")
        if saved_class is not None and saved_class != _class_name(target):
            raise CheckpointError(
                f"{source}: {label} was saved from a {saved_class}, but this run's is a "
                f"{_class_name(target)}. Expected the configure_optimizers of the saved run."
            )
        try:
            target.load_state_dict(entry["state"])
        except (ValueError, KeyError, TypeError, RuntimeError) as error:
            raise CheckpointError(
                f"{source}: its {label} state does not fit this run's {_class_name(target)} "
                f"({_first_line(error)}). Expected the configure_optimizers of the saved run."
            ) from None


def _restore_precision(trainer: Any, saved: dict[str, Any], source: str) -> None:
    if saved["name"] == trainer.precision.name:
        trainer.precision.load_state_dict(saved["state"])
    elif saved["state"]:
        warnings.warn(
            f"{source} was saved with precision={saved['name']!r}; this run uses "
            f"{trainer.precision.name!r}, so the saved GradScaler state (loss scale and growth "
            "tracker) is dropped.",
            stacklevel=5,
        )


def find_last(root_dir: str | os.PathLike[str]) -> Path | None:
    """The newest `last.ckpt` under `root_dir`, or None."""
    candidates = [p for p in Path(root_dir).glob("**/last.ckpt") if p.is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None


def _plain(value: Any) -> Any:
    """Config values as plain data that `weights_only=True` loading accepts."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
