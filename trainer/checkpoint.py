"""Checkpoint files: atomic writes and loads that never execute code.

A checkpoint is a dict of `state_dict`s plus a format marker. It is written to a
temporary file beside the target, flushed and fsync'ed, then `os.replace`d over the
target, so a crash at any moment leaves the previous file intact. It is read with
`torch.load(weights_only=True)`, which refuses anything but tensors and plain data.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

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
]

FORMAT = "loopwright.checkpoint"
FORMAT_VERSION = 1
_TMP_SUFFIX = ".tmp"


class CheckpointError(ValueError):
    """A checkpoint file is missing, damaged, foreign or does not fit the run."""


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{_TMP_SUFFIX}")


def _clear_stale_temporaries(path: Path) -> None:
    for stale in path.parent.glob(f".{path.name}.*{_TMP_SUFFIX}"):
        try:
            stale.unlink()
        except FileNotFoundError:
            pass


def save_atomic(state: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write `state` to `path` so that `path` is always either the old or the new file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale_temporaries(target)
    temporary = _temporary_name(target)
    try:
        with open(temporary, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)
    return target


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


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint file; raise `CheckpointError` naming the file and the problem."""
    source = Path(path)
    if not source.is_file():
        raise CheckpointError(
            f"Checkpoint {str(source)!r} does not exist. Expected the path of a file written by "
            "Trainer.save_checkpoint (or ckpt_path='last' to resume the newest run)."
        )
    try:
        state = torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"Checkpoint {str(source)!r} holds objects that are not plain data or tensors, so it "
            f"was refused without running any of it ({_first_line(error)}). Only files written by "
            "Trainer.save_checkpoint can be loaded."
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(
            f"Checkpoint {str(source)!r} is truncated or corrupt and can't be read "
            f"({_first_line(error)}). Use an earlier checkpoint; an interrupted save never "
            "replaces a good file, so the previous one is still beside it if it existed."
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"Checkpoint {str(source)!r} is not a checkpoint of this trainer (no {FORMAT!r} marker). "
            "Expected a file written by Trainer.save_checkpoint; to load bare weights, use "
            "module.load_state_dict(torch.load(path, weights_only=True))."
        )
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {str(source)!r} has format version {version!r}, newer than this version "
            f"of the trainer reads ({FORMAT_VERSION}). Upgrade the package to load it."
        )
    return state


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


# --------------------------------------------------------------------------- trainer state
def collect_state(trainer: Any) -> dict[str, Any]:
    """Everything needed to continue exactly: a dict of `state_dict`s and plain data."""
    from trainer._utils import rng_state

    opt = trainer._opt
    module = trainer._module
    state: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "module": module.state_dict(),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "optimizer": opt.optimizer.state_dict() if opt is not None else None,
        "lr_scheduler": opt.scheduler.state_dict() if opt is not None and opt.scheduler is not None else None,
        "precision": {"name": trainer.precision.name, "state": trainer.precision.state_dict()},
        "loop": trainer.state.state_dict(),
        "rng": trainer.strategy.all_gather_object(rng_state()),
        "epoch_data_rng": trainer._io.epoch_data_rng,
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "config": _plain(trainer.args.model_dump(exclude={"callbacks", "logger", "precision"})),
        "hparams": _plain(dict(getattr(module, "hparams", {}) or {})),
    }
    trainer._dispatch.call("on_save_checkpoint", trainer, module, state)
    return state


def restore_module(module: Any, checkpoint: dict[str, Any], source: str) -> None:
    """Load the weights; on a mismatch name every missing, unexpected and mis-shaped entry."""
    saved = checkpoint["module"]
    own = module.state_dict()
    missing = sorted(set(own) - set(saved))
    unexpected = sorted(set(saved) - set(own))
    misshaped = sorted(
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(saved)
        if isinstance(saved[k], torch.Tensor) and saved[k].shape != own[k].shape
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


def restore_state(trainer: Any, checkpoint: dict[str, Any]) -> None:
    """Put the Trainer back exactly where `collect_state` found it."""
    from trainer._utils import set_rng_state

    source = f"Checkpoint {checkpoint.get('_path', '')!r}".replace(" ''", "")
    restore_module(trainer._module, checkpoint, source)
    opt = trainer._opt
    if opt is not None and checkpoint.get("optimizer") is not None:
        opt.optimizer.load_state_dict(checkpoint["optimizer"])
    if opt is not None and opt.scheduler is not None and checkpoint.get("lr_scheduler") is not None:
        opt.scheduler.load_state_dict(checkpoint["lr_scheduler"])
    saved_precision = checkpoint["precision"]
    if saved_precision["name"] == trainer.precision.name:
        trainer.precision.load_state_dict(saved_precision["state"])
    elif saved_precision["state"]:
        import warnings

        warnings.warn(
            f"{source} was saved with precision={saved_precision['name']!r}; this run uses "
            f"{trainer.precision.name!r}, so the saved GradScaler state (loss scale and growth "
            "tracker) is dropped.",
            stacklevel=3,
        )
    trainer.state.load_state_dict(checkpoint["loop"])
    by_key = {cb.state_key: cb for cb in trainer.callbacks}
    for key, cb_state in checkpoint.get("callbacks", {}).items():
        if key in by_key:
            by_key[key].load_state_dict(cb_state)
    trainer._io.epoch_data_rng = checkpoint.get("epoch_data_rng")
    rngs = checkpoint["rng"]
    set_rng_state(rngs[min(trainer.strategy.rank, len(rngs) - 1)])
    trainer._dispatch.call("on_load_checkpoint", trainer, trainer._module, checkpoint)


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
