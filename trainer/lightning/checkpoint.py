"""Lightning's checkpoint keys: beside ours in the files we write, and Lightning's own files read.

- `add_lightning_keys`: a file reads the Lightning way too (`state_dict`, `epoch`,
  `global_step`, `hyper_parameters`, `optimizer_states`, `lr_schedulers`); each is the same
  object as our entry, so the file stores it once (`reunite` keeps them one after a hook);
- `from_lightning`: a checkpoint written by PyTorch Lightning 2.x in our layout (weights,
  optimizer and scheduler states, epoch and step, the GradScaler), and `adopt_streams`: what
  such a file can't give (random streams, data order) taken from the running process.

Nothing here reads a file: the checkpoint reader (`trainer/checkpoint/format.py`) calls these on
what `torch.load(weights_only=True)` returned, and the writer (`trainer/checkpoint/state.py`)
on the dict it builds.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from trainer._utils import rng_state

__all__ = [
    "LIGHTNING_VERSION_KEY",
    "lightning_epoch",
    "add_lightning_keys",
    "sharded_lightning_keys",
    "reunite",
    "is_lightning",
    "from_lightning",
    "lightning_refusal",
    "adopt_streams",
]

LIGHTNING_VERSION_KEY = "pytorch-lightning_version"
#: What our files give as Lightning's version key: its 2.x layout, so Lightning's own readers
#: (`LightningModule.load_from_checkpoint`) take them and apply no migration. Our reader tells
#: the two apart by our format marker.
LIGHTNING_LAYOUT = "2.0.0"
_ALIASES = (("state_dict", "module"), ("hyper_parameters", "hparams"))  # Lightning's name, ours
_SCALER_KEYS = ("MixedPrecision", "native_amp_scaling_state")  # Lightning 2.x, Lightning 1.x


# ------------------------------------------------------------------------- our files
def lightning_epoch(loop: dict[str, Any]) -> int:
    """`epoch` as Lightning's checkpoints hold it: the epoch in progress or, at an epoch
    boundary, the epoch that just ended (Lightning writes its epoch-end files before it
    counts the epoch as complete; `epoch=4-step=500.ckpt` holds 4)."""
    epoch, done = int(loop["epoch"]), int(loop["batches_done"])
    return epoch - 1 if done == 0 and epoch > 0 else epoch


def add_lightning_keys(state: dict[str, Any], loop: dict[str, Any] | None) -> None:
    """Add Lightning's keys to a checkpoint dict, each the same object as ours."""
    for lightning, ours in _ALIASES:
        if ours in state:
            state[lightning] = state[ours]
    if isinstance(state.get("optimizers"), list):
        state["optimizer_states"] = [_state_of(entry) for entry in state["optimizers"]]
    if isinstance(state.get("schedulers"), list):
        state["lr_schedulers"] = [_state_of(entry) for entry in state["schedulers"]]
    if isinstance(loop, dict) and isinstance(loop.get("epoch"), int) and isinstance(loop.get("batches_done"), int):
        state["epoch"], state["global_step"] = lightning_epoch(loop), int(loop.get("global_step", 0))
    state.setdefault(LIGHTNING_VERSION_KEY, LIGHTNING_LAYOUT)


def sharded_lightning_keys(meta: dict[str, Any]) -> None:
    """Lightning's keys in a sharded folder's state file, after its tensors went into the
    shards: no weights (`state_dict` empty), the optimizer entries it keeps."""
    meta["state_dict"] = {}
    if isinstance(meta.get("optimizers"), list):
        meta["optimizer_states"] = [_state_of(entry) for entry in meta["optimizers"]]


def _state_of(entry: Any) -> Any:
    return entry.get("state") if isinstance(entry, dict) else None


def reunite(state: dict[str, Any], before: dict[str, Any]) -> None:
    """After `on_save_checkpoint`: a hook that replaced `state_dict` (Lightning's idiom) or
    `module` (ours) decides both, so the file never holds two different weights."""
    for lightning, ours in _ALIASES:
        if lightning in state and state[lightning] is not before.get(lightning):
            state[ours] = state[lightning]
        elif ours in state and state[ours] is not before.get(ours):
            state[lightning] = state[ours]


# ------------------------------------------------------------------- Lightning's files
def is_lightning(state: Any) -> bool:
    """A dict as Lightning's `dump_checkpoint` writes it (it always records its version)."""
    return isinstance(state, dict) and LIGHTNING_VERSION_KEY in state and "format" not in state


def from_lightning(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """A Lightning checkpoint in our layout, Lightning's own keys kept (a module's
    `on_load_checkpoint` may read what its `on_save_checkpoint` added). A file saved with
    `save_weights_only=True` has weights only. Raises ValueError naming the file."""
    version = raw.get(LIGHTNING_VERSION_KEY)
    problems = []
    weights = raw.get("state_dict")
    if not isinstance(weights, dict) or not all(isinstance(k, str) for k in weights):
        problems.append(f"'state_dict' is a {type(weights).__name__}, not a dict of the module's tensors")
    for key in ("epoch", "global_step"):
        if not isinstance(raw.get(key), int) or isinstance(raw.get(key), bool) or raw[key] < 0:
            problems.append(f"{key!r} is {raw.get(key)!r}, not a count")
    full = "optimizer_states" in raw
    for key in ("optimizer_states", "lr_schedulers") if full else ():
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            problems.append(f"{key!r} is not a list of state dicts")
    if problems:
        raise ValueError(
            f"Checkpoint {name} says it was written by PyTorch Lightning {version} but can't be read: "
            f"{'; '.join(problems)}. Expected a file saved by Lightning's Trainer.save_checkpoint or ModelCheckpoint."
        )
    hparams = raw.get("hyper_parameters")
    state = dict(raw)
    state.update(
        module=weights, module_class=f"a Lightning {version} module", hparams=hparams if isinstance(hparams, dict) else {},
        origin={"lightning": str(version)}, lightning_callbacks=raw.get("callbacks", {}), callbacks={},
    )
    if not full:  # save_weights_only=True: evaluation only (check_layout says so for a resume)
        state["weights_only"] = True
        return state
    epoch, batches_done, before = _position(raw)
    scaler = next((raw[k] for k in _SCALER_KEYS if isinstance(raw.get(k), dict) and raw[k]), None)
    state.update(
        optimizers=[{"class": None, "state": s} for s in raw["optimizer_states"]],
        schedulers=[{"class": None, "state": s} for s in raw.get("lr_schedulers", [])],
        precision={"name": "amp", "state": scaler} if scaler is not None else {"name": "fp32", "state": {}},
        loop={"epoch": epoch, "global_step": raw["global_step"], "batches_done": batches_done, "skipped_steps": 0,
              "batches_before_epoch": before, "elapsed": 0.0, "validation_pending": False, "epoch_end_validated": False},
        rng=[None], data=[{}], cut={"clean": True, "reason": None}, config={},  # streams: adopt_streams, at restore
    )
    return state


def _position(raw: dict[str, Any]) -> tuple[int, int, int]:
    """(epoch, batches done in it, batches of the epochs before) from Lightning's loop record.

    Lightning's `epoch` alone is ambiguous (its epoch-end files are written before the epoch
    counts as complete), so its fit loop's progress decides: an epoch whose training batches
    all ran (Lightning already stepped its epoch-interval schedulers) continues at the next
    epoch's start; an epoch cut inside continues after the batches it ran. Files without the
    record (Lightning before 1.6) start the epoch `epoch`, as Lightning itself reads them.
    """
    fit = raw.get("loops", {}).get("fit_loop") if isinstance(raw.get("loops"), dict) else None
    epochs = _counts(fit, "epoch_progress")
    batches = _counts(fit, "epoch_loop.batch_progress")
    if epochs is None:
        return raw["epoch"], 0, 0
    total = batches.get("total_processed", 0) if batches is not None else 0
    done = batches.get("processed", 0) if batches is not None else 0
    if epochs["processed"] > epochs["completed"]:  # written in on_train_epoch_end
        return epochs["processed"], 0, total
    if epochs["started"] > epochs["completed"] and done > 0:  # the epoch was running
        if batches is not None and batches.get("is_last_batch"):
            return epochs["completed"] + 1, 0, total  # its last batch ran: only its end was left
        return epochs["completed"], done, max(total - done, 0)
    return epochs["completed"], 0, total


def _counts(fit: Any, key: str) -> dict[str, Any] | None:
    """The `current` counters of one of Lightning's progress records (with the total of processed)."""
    record = fit.get(key) if isinstance(fit, dict) else None
    if not isinstance(record, dict):
        return None
    current = record.get("current")
    names = ("ready", "started", "processed", "completed")
    if not isinstance(current, dict) or not all(isinstance(current.get(n, 0), int) for n in names):
        return None
    counts: dict[str, Any] = {n: int(current.get(n, 0)) for n in names}
    total = record.get("total")
    processed = total.get("processed", 0) if isinstance(total, dict) else 0
    counts["total_processed"] = processed if isinstance(processed, int) else 0
    counts["is_last_batch"] = bool(record.get("is_last_batch", False))
    return counts


def lightning_refusal(path: Path, name: str, detail: str) -> str | None:
    """The message for a Lightning file that `weights_only=True` refused, or None when the
    file is not Lightning's (its pickle, read as bytes, names Lightning's version key)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickle_entry = next((e for e in archive.namelist() if e.endswith("/data.pkl")), None)
            pickled = archive.read(pickle_entry) if pickle_entry is not None else b""
            if LIGHTNING_VERSION_KEY.encode() not in pickled or b"loopwright.checkpoint" in pickled:  # ours has both
                return None
    except Exception:  # noqa: BLE001 - an unreadable archive: the generic message applies
        return None
    return (
        f"Checkpoint {name} was written by PyTorch Lightning and holds objects that are not plain data or "
        f"tensors ({detail}), most likely in its hyper_parameters (save_hyperparameters of an argparse "
        "Namespace, an OmegaConf config, a Path or an Enum), so it was refused without running any of it. "
        "If you trust the file, either allow those classes once before loading, "
        "torch.serialization.add_safe_globals([TheClass]), or rewrite it as plain data: "
        "ckpt = torch.load(path, weights_only=False); ckpt['hyper_parameters'] = "
        "{k: str(v) for k, v in dict(ckpt['hyper_parameters']).items()}; ckpt.pop('hparams_type', None); "
        "torch.save(ckpt, path)."
    )


def adopt_streams(checkpoint: dict[str, Any], source: str) -> str | None:
    """Before a Lightning file is restored: the run keeps this process's random streams
    (seeded by `Trainer(seed=...)` when given), and a position inside an epoch skips that
    many batches of an order drawn from them. Returns the warning to give; None, with
    nothing changed, for a file of ours."""
    if "lightning" not in (checkpoint.get("origin") or {}):
        return None
    loop = checkpoint["loop"]
    inside = loop["batches_done"] > 0
    checkpoint["rng"] = [rng_state()]
    start = {"torch": torch.get_rng_state(), "generators": {}} if inside else None
    checkpoint["data"] = [{"epoch_start": start, "generators": {}, "loader": None}]
    version = checkpoint.get("origin", {}).get("lightning")
    scaler = " and the GradScaler's state" if checkpoint["precision"]["state"] else ""
    if inside:
        where = (
            f"It was written {loop['batches_done']} batches into epoch {loop['epoch']}: training continues in that "
            f"epoch and skips its first {loop['batches_done']} batches of a new order, so some of its samples are "
            "seen twice and others not at all in this epoch."
        )
    else:
        where = f"Training continues at the start of epoch {loop['epoch']}."
    return (
        f"{source} was written by PyTorch Lightning {version}. Taken over: the weights, the optimizer and "
        f"scheduler states{scaler} and the global step ({loop['global_step']}). {where} Not restored, since a "
        "Lightning file does not hold them in a form this trainer reads: the random streams and the position "
        "in the data order (this run's own are used), and the callback states (ModelCheckpoint's best files "
        "and EarlyStopping's counters start fresh). The continuation is a valid run, not the one Lightning "
        "would have made."
    )
