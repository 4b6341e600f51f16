"""Lightning's spellings of the Trainer's arguments, wherever they are given: aliases where the
meaning is ours, a clear error saying what to write instead where it is not (docs/lightning.md
has the whole table).

- `translate`: `Trainer(...)`'s keyword arguments (`default_root_dir`, `accelerator`,
  `devices=[i]`, one callback alone, ...); called by `Trainer.__init__` before validation;
- `precision_name` / `precision_of`: `precision="16-mixed"`, `"bf16-mixed"`, `"32-true"`, 16,
  ...: the validated name (`TrainerArgs`), then the `Precision` object as Lightning runs it on
  the run's device (`Trainer.__init__`);
- `strategy_of`: `strategy="ddp_find_unused_parameters_true"`, `"fsdp_cpu_offload"`, ...: our
  name or object (`TrainerArgs`); `"ddp_spawn"`, `"deepspeed"`, ... say what to write instead;
- `lightning_layout` / `lightning_trainer_section`: the same in a YAML file (the YAML schema,
  `trainer/config/schema.py`): LightningCLI's `trainer.callbacks` / `trainer.logger`, and
  `translate` on the `trainer:` section. Problems come back as (YAML path, message) pairs.

Example:
    >>> translate({"precision": "bf16", "callbacks": None}, {"default_root_dir": "runs/x", "accelerator": "cpu"},
    ...           known=["precision", "callbacks"])
    {'precision': 'bf16', 'callbacks': None, 'root_dir': 'runs/x', 'device': 'cpu'}
    >>> precision_name(16), precision_name("32-true"), precision_name("bf16"), precision_name("fp16")
    ('16-mixed', 'fp32', 'bf16', None)
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from trainer.precision import Precision
    from trainer.strategies.base import Strategy

__all__ = [
    "translate", "precision_name", "precision_of", "strategy_of", "lightning_layout", "lightning_trainer_section",
    "saved_trainer_section",
]

_PRECISION_REFUSED = {
    "bf16-true": "bfloat16 weights (no float32 master copy); we keep float32 weights: precision='bf16'",
    "16-true": "float16 weights; we keep float32 weights: precision='amp'",
    "64-true": "float64; call model.double() and pass float64 batches with precision='fp32'",
    "64": "float64; call model.double() and pass float64 batches with precision='fp32'",
    64: "float64; call model.double() and pass float64 batches with precision='fp32'",
    "transformer-engine": "Transformer Engine's FP8; not supported",
}
#: Lightning's precision names with a meaning here: fp32, or the mixed precisions as Lightning
#: runs them (`precision_of`).
_PRECISION_NAMES: dict[Any, str] = {
    "16-mixed": "16-mixed", "16": "16-mixed", 16: "16-mixed",
    "bf16-mixed": "bf16-mixed",
    "32-true": "fp32", "32": "fp32", 32: "fp32",
}
_ACCELERATORS = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "mps": "mps", "auto": "auto"}

# Lightning arguments we do not take, and what to write instead.
_INSTEAD = {
    "num_nodes": "launch with torchrun --nnodes=N; strategy='ddp' reads the world size from torchrun",
    "plugins": "not supported: pass precision=... or a trainer.precision.Precision instance",
    "track_grad_norm": "the gradient norm is logged as train/grad_norm automatically",
    "accumulate_grad_batches_schedule": "not supported",
    "gradient_clip_algorithm_norm_type": "not supported",
    "move_metrics_to_cpu": "metrics stay on their device until written; nothing to set",
    "default_hp_metric": "not needed: hyperparameters are logged without a placeholder metric",
    "enable_checkpoint": "spelled enable_checkpointing",
    "resume_from_checkpoint": "pass ckpt_path=... to fit",
    "gpus": "device='cuda' (one process) or torchrun with strategy='ddp'",
    "tpu_cores": "not supported",
    "auto_lr_find": "not supported",
    "auto_scale_batch_size": "not supported",
    "weights_save_path": "root_dir=... (or ModelCheckpoint(dirpath=...))",
    "model_registry": "no model registry is integrated: upload the checkpoint yourself after fit "
    "(trainer.checkpoint_callback.best_model_path, or the run's last.ckpt)",
}
#: Arguments whose default in Lightning's signature is None, and what that None means: a config
#: that lists every argument (a Hydra dump, `builds(Trainer, populate_full_signature=True)`)
#: writes `null` for them.
_NONE_IS_DEFAULT: dict[str, Any] = {
    "gradient_clip_algorithm": "norm", "precision": "fp32", "logger": True, "num_sanity_val_steps": 2,
    "log_every_n_steps": 50, "enable_checkpointing": True, "enable_progress_bar": True, "enable_model_summary": True,
}
#: Lightning arguments taken at their default only: that value is what this Trainer does.
_AT_DEFAULT: dict[str, Any] = {"num_nodes": 1, "model_registry": None}


def translate(arguments: dict[str, Any], lightning: dict[str, Any], known: Iterable[str]) -> dict[str, Any]:
    """`arguments` (ours) with Lightning's spellings in `lightning` and in values mapped
    onto them; a spelling that has no equivalent raises a ValueError saying what to write,
    a name that is neither one says which of `known` (our argument names) it may mean."""
    out = dict(arguments)
    precision = out.get("precision")
    if isinstance(precision, (str, int)) and not isinstance(precision, bool):
        if precision in _PRECISION_REFUSED:
            raise ValueError(
                f"Trainer(precision={precision!r}) means {_PRECISION_REFUSED[precision]}. "
                "Expected one of 'fp32', 'amp', 'bf16' (Lightning's '32-true', '16-mixed', 'bf16-mixed')."
            )
    setting = getattr(out.get("profiler"), "trainer_setting", None)
    if callable(setting):  # Lightning's profiler objects (trainer.profilers): what they stand for here
        out["profiler"] = setting()
    for name, default in _NONE_IS_DEFAULT.items():  # Lightning's signature defaults, as a full config dump writes them
        if name in out and out[name] is None:
            out[name] = default
    _check_time_interval(out.get("val_check_interval"))
    callbacks = out.get("callbacks")
    if callbacks is not None and not isinstance(callbacks, (list, tuple)):
        out["callbacks"] = [callbacks]  # Lightning takes one callback alone too
    if isinstance(out.get("devices"), list):  # Lightning's devices=[i]: GPU i, one process
        _check_devices(out.pop("devices"), out)
    for name, value in lightning.items():
        if name == "default_root_dir":
            if value is not None:  # Lightning's default (None): the Trainer's own root_dir
                out["root_dir"] = value
        elif name == "plugins":
            _check_plugins(value)
        elif name == "accelerator":
            value = getattr(value, "trainer_device", value)  # CUDAAccelerator() and the like: its device name
            if value not in _ACCELERATORS:
                raise ValueError(
                    f"Trainer(accelerator={value!r}) expected one of {', '.join(map(repr, _ACCELERATORS))}. "
                    "Or pass device='cuda:1' (say) directly."
                )
            if out.get("device", "auto") == "auto":
                out["device"] = _ACCELERATORS[value]
        elif name in _AT_DEFAULT and value == _AT_DEFAULT[name]:
            continue  # Lightning's default, which is what this Trainer does (a config that writes every argument)
        elif name in _INSTEAD:
            raise ValueError(f"Trainer({name}=...) is Lightning's; it is not an argument here: {_INSTEAD[name]}.")
        else:
            raise ValueError(_unknown(name, known))
    return out


def _check_time_interval(value: Any) -> None:
    """Lightning 2.6's wall-clock `val_check_interval` ("DD:HH:MM:SS", a dict, a timedelta)."""
    import datetime

    if isinstance(value, (str, dict, datetime.timedelta)):
        raise ValueError(
            f"Trainer(val_check_interval={value!r}) validates by wall-clock time in Lightning; not taken here: "
            "where such a validation falls depends on the machine's speed, so neither the run nor its resume "
            "could be repeated exactly. Expected an int number of training batches (with "
            "check_val_every_n_epoch=None to count them over the whole run) or a fraction of the epoch."
        )


def _check_plugins(value: Any) -> None:
    """Lightning's `plugins=`: None or empty (its default) is accepted; each plugin given names
    the argument that replaces it here (`trainer.plugins`), and the first raises."""
    items = [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        instead = getattr(item, "trainer_instead", None)
        what, given = (instead(), f"{type(item).__name__}(...)") if callable(instead) else (_INSTEAD["plugins"], repr(item))
        raise ValueError(f"Trainer(plugins=[{given}]) is Lightning's; the Trainer takes no plugins. Write instead: {what}.")


def _check_devices(value: list[Any], out: dict[str, Any]) -> None:
    """Lightning's `devices=[i]`: GPU i alone (`devices=N` is our own argument)."""
    if len(value) == 1 and isinstance(value[0], int):
        if out.get("device", "auto") in ("auto", "cuda"):
            out["device"] = f"cuda:{value[0]}"
        return
    raise ValueError(
        f"Trainer(devices={value!r}): a list picks one GPU here. Expected devices=N (N processes, one GPU "
        "each: choose which with CUDA_VISIBLE_DEVICES) or devices=[i] for GPU i alone."
    )


def _unknown(name: str, ours: Iterable[str]) -> str:
    import difflib

    known = list(ours) + ["accelerator", "default_root_dir"]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"Trainer() got an unknown argument {name!r}.{hint} Expected one of: {', '.join(known)}."


# ------------------------------------------------------------------------------ precision
def precision_name(value: Any) -> str | None:
    """The name a precision given by name goes by: ours, or Lightning's mixed ones (kept, since
    what they mean depends on the device); None for anything else."""
    from trainer.precision import PRECISIONS

    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    if isinstance(value, str) and value in PRECISIONS:
        return value
    return _PRECISION_NAMES.get(value)


def precision_of(precision: str | Precision, device: torch.device | None = None) -> Precision:
    """The `Precision` object for a validated `Trainer(precision=...)` on `device`.

    Lightning's `"bf16-mixed"` and `"16-mixed"` are `BF16`/`AMP` as Lightning's Trainer runs
    them: without autocast's weight cache; and `"16-mixed"` on a CPU runs as `"bf16-mixed"`
    (with Lightning's warning), so a Lightning project trains to Lightning's weights. Our own
    names and instances are `trainer.precision.resolve_precision`'s.
    """
    from trainer.precision import AMP, BF16, resolve_precision

    if not isinstance(precision, str):  # an instance (which also equals its Lightning name) is kept as given
        return resolve_precision(precision)
    if precision == "bf16-mixed":
        return BF16(autocast_cache=False)
    if precision == "16-mixed":
        if device is not None and device.type == "cpu":
            warnings.warn(
                "Trainer(precision='16-mixed') on a CPU runs as 'bf16-mixed', as Lightning does (float16 "
                "autocast is not supported there). For float16 autocast with a GradScaler on a CPU, pass "
                "precision='amp'.",
                stacklevel=3,
            )
            return BF16(autocast_cache=False)
        return AMP(autocast_cache=False)
    return resolve_precision(precision)


# ------------------------------------------------------------------------------- strategy
#: Lightning's strategy names that have no counterpart here, with what to write instead.
_STRATEGIES_INSTEAD = {
    "ddp_spawn": "processes are started by torchrun or devices=N, never spawned from a running one: strategy='ddp'",
    "ddp_fork": "processes are started by torchrun or devices=N: strategy='ddp'",
    "ddp_notebook": "a notebook trains in one process; for several, run a script with torchrun and strategy='ddp'",
    "dp": "DataParallel is not supported (PyTorch recommends DDP): strategy='ddp' under torchrun",
    "deepspeed": "DeepSpeed is not integrated: strategy='fsdp' shards parameters, gradients and optimizer state",
}


def strategy_of(name: str) -> Strategy | str | None:
    """A Lightning strategy name as ours ("ddp_find_unused_parameters_true" is
    `DDP(find_unused_parameters=True)`), None for a name Lightning doesn't have either.

    Raises:
        ValueError: a Lightning name without a counterpart, saying what to write instead.
    """
    from trainer.strategies.ddp import DDP
    from trainer.strategies.fsdp import FSDP

    if name == "ddp_find_unused_parameters_true":
        return DDP(find_unused_parameters=True)
    if name == "ddp_find_unused_parameters_false":
        return "ddp"
    if name == "fsdp_cpu_offload":
        return FSDP(cpu_offload=True)
    if name == "single_device":
        return "single"
    base = name.split("_stage")[0] if name.startswith("deepspeed") else name
    if base in _STRATEGIES_INSTEAD:
        raise ValueError(f"{name!r} is Lightning's; it is not a strategy here: {_STRATEGIES_INSTEAD[base]}")
    return None


# ------------------------------------------------------------------- a YAML file's trainer section
def lightning_layout(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """LightningCLI's layout as ours: `trainer.callbacks` / `trainer.logger` (where
    `Trainer(callbacks=..., logger=...)` takes them) are the top-level sections, and one
    callback alone is a list of one. `config` itself is left as it is."""
    out, problems = dict(config), []
    section = out.get("trainer")
    if isinstance(section, dict) and ("callbacks" in section or "logger" in section):
        out["trainer"] = section = dict(section)
        for key in ("callbacks", "logger"):
            if key not in section:
                continue
            if key in out:
                problems.append((f"trainer.{key}", f"given twice: also at the top level. Expected one `{key}:`."))
            out[key] = section.pop(key)
    if isinstance(out.get("callbacks"), dict):
        out["callbacks"] = [out["callbacks"]]
    return out, problems


def lightning_trainer_section(
    values: dict[str, Any], known: Collection[str],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Lightning's Trainer spellings in a YAML `trainer:` section (`default_root_dir`,
    `accelerator`, `devices: [i]`), read as `Trainer(...)` reads them; a Lightning name we do
    not take says what to write instead. A name nobody knows (not in `known`, our argument
    names) is left to the validation, which suggests one."""
    problems: list[tuple[str, str]] = []
    lightning: dict[str, Any] = {}
    for name in [n for n in values if n not in known]:
        try:
            translate({}, {name: values[name]}, known)
        except ValueError as error:
            if "unknown argument" not in str(error):
                value = values.pop(name)
                problems.append((f"trainer.{name}", f"{error} Received: {value!r} of type {type(value).__name__}."))
            continue
        lightning[name] = values.pop(name)
    try:
        return translate(values, lightning, known), problems
    except ValueError as error:
        return values, problems + [("trainer", str(error))]


#: Lightning's Trainer arguments at their defaults, as a config LightningCLI saved lists them.
_SAVED_UNSET: dict[str, Any] = {"num_nodes": 1, "enable_autolog_hparams": True, "max_steps": -1}


def saved_trainer_section(section: Mapping[str, Any]) -> dict[str, Any]:
    """The `trainer:` section of a config LightningCLI saved, with what it did not set left out:
    every argument is listed there, `null` where unset (the default), and Lightning-only ones at
    their defaults (`num_nodes: 1`)."""
    return {k: v for k, v in section.items() if v is not None and not (k in _SAVED_UNSET and _SAVED_UNSET[k] == v)}


def _name_precisions() -> None:
    """Give each of our precisions Lightning's name for it (`Precision.lightning_name`), so
    `trainer.precision == "16-mixed"` holds under AMP as in Lightning."""
    from trainer.precision import AMP, BF16, FP32, Precision

    for kind, name in ((Precision, "32-true"), (FP32, "32-true"), (BF16, "bf16-mixed"), (AMP, "16-mixed")):
        kind.lightning_name = name


_name_precisions()
