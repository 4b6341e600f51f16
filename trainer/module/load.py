"""`Module.load_from_checkpoint`: rebuild a module from a checkpoint's hyperparameters and weights
(Lightning's `LightningModule.load_from_checkpoint`), through the checkpoint reader that never
executes code."""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from trainer._hparams import AttributeDict

__all__ = ["load_module", "strictness"]

_PLAIN = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _as_saved(value: Any) -> str:
    """The text a non-plain hyperparameter is saved as, without the object's address
    (`<function f at 0x7f...>` differs from process to process)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", str(value))


def _defaults_for_text(cls: type, path: Any, hparams: dict[str, Any], overrides: dict[str, Any],
                       parameters: Any) -> dict[str, Any]:
    """`hparams` with each argument that was saved as the text of a class, function or other
    object (a checkpoint holds no code) given back as `__init__`'s own default when the text is
    that default's: `encoder_class: object = Encoder` saved by `save_hyperparameters()` rebuilds
    with `Encoder`, as Lightning's pickled checkpoint does.

    Raises:
        ValueError: the text is not the default's and the default is such an object (a string
            would not do in its place): the argument must be passed again, as an override.
    """
    result = dict(hparams)
    for name, value in hparams.items():
        parameter = parameters.get(name)
        if name in overrides or not isinstance(value, str) or parameter is None or parameter.default is parameter.empty:
            continue
        default = parameter.default
        if isinstance(default, _PLAIN) or isinstance(default, torch.Tensor):
            continue
        if _as_saved(value) == _as_saved(default):
            result[name] = default
        elif callable(default):
            raise ValueError(
                f"{cls.__name__}.load_from_checkpoint({str(path)!r}): the hyperparameter {name!r} was saved as the "
                f"text {value!r} (a checkpoint holds plain data, never a class or function), and it is not "
                f"{cls.__name__}.__init__'s default ({_as_saved(default)}). Expected it again as an override: "
                f"{cls.__name__}.load_from_checkpoint(path, {name}=...)."
            )
    return result


def _where(map_location: Any) -> Any:
    """Lightning's default: the saved device, or the CPU when that device is missing here."""
    if map_location is not None:
        return map_location

    def fallback(storage: Any, location: str) -> Any:
        if location.startswith("cuda") and not torch.cuda.is_available():
            return storage.cpu()
        if location.startswith("mps") and not torch.backends.mps.is_available():
            return storage.cpu()
        return None

    return fallback


def strictness(module: Any, strict: bool | None, what: str) -> bool:
    """Whether `module` loads its weights strictly: `strict` when given, else `module.strict_loading`
    (Lightning's rule in `_load_state`).

    Args:
        module: the module the weights load into (its `strict_loading`, if set, is read).
        strict: the caller's `strict=`; None: the module decides.
        what: the call, for the error message.

    Returns:
        Whether every key must match.

    Raises:
        ValueError: `strict=False` while the module set `strict_loading = True` (Lightning's error).
    """
    chosen = module.__dict__.get("_strict_loading")  # None: the module never set strict_loading
    if strict is None or chosen is None:
        return bool(module.strict_loading) if strict is None else strict
    if strict is True and chosen is False:
        # `load_from_checkpoint`'s default is strict=True, which can't be told from an explicit
        # True: the module's `strict_loading = False` wins.
        return False
    if strict != bool(chosen):
        raise ValueError(
            f"You set `{what}(..., strict={strict!r})` which is in conflict with `{type(module).__name__}.strict_loading="
            f"{bool(chosen)!r}`. Please set the same value for both of them."
        )
    return strict


def load_module(cls: type, path: Any, map_location: Any, strict: bool | None, overrides: dict[str, Any],
                hparams_file: Any = None) -> Any:
    """`cls.load_from_checkpoint(path, map_location, hparams_file, strict, **overrides)`.

    Args:
        cls: the module class to build.
        path: a checkpoint file (ours or Lightning's).
        map_location: as `torch.load`'s; None: where the weights were saved, or the CPU.
        strict: whether every key must match; None: the module's `strict_loading`.
        overrides: hyperparameters that replace the saved ones.
        hparams_file: a YAML file whose hyperparameters replace the checkpoint's (overrides still win).

    Returns:
        The module, with the checkpoint's weights, on the weights' device.
    """
    from trainer.checkpoint.format import CheckpointError, load_checkpoint
    from trainer.checkpoint.storage import is_remote

    if not is_remote(path) and Path(path).is_dir():
        raise CheckpointError(
            f"{cls.__name__}.load_from_checkpoint({str(path)!r}): a folder of shards (an FSDP run). Expected one "
            "file: write it with `trainer export FOLDER weights.pt`, then load_state_dict(torch.load('weights.pt'))."
        )
    from trainer._hparams import read_hparams_file

    file_hparams = None if hparams_file is None else read_hparams_file(hparams_file, f"{cls.__name__}.load_from_checkpoint")
    checkpoint = load_checkpoint(path, map_location=_where(map_location))
    hparams = dict(checkpoint.get("hparams") or checkpoint.get("hyper_parameters") or {})
    if file_hparams is not None:
        hparams = file_hparams
    hparams.update(overrides)
    parameters = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        taken = {k: v for k, v in hparams.items() if k in parameters}  # as Lightning: only what __init__ takes
        required = [n for n, p in list(parameters.items())[1:] if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
        if hparams and not taken and len(required) == 1:  # `__init__(self, hparams)` + save_hyperparameters(hparams)
            taken = {required[0]: AttributeDict(hparams)}  # Lightning passes the saved dict under its name
        hparams = taken
    hparams = _defaults_for_text(cls, path, hparams, overrides, parameters)
    module = cls(**hparams)
    strict = strictness(module, strict, f"{cls.__name__}.load_from_checkpoint")
    module.on_load_checkpoint(checkpoint)
    weights = checkpoint["module"]
    result = module.load_state_dict(weights, strict=strict)
    if not strict:  # Lightning's warnings
        if result.missing_keys:
            warnings.warn(
                f"Found keys that are in the model state dict but not in the checkpoint: {list(result.missing_keys)}",
                stacklevel=3,
            )
        if result.unexpected_keys:
            warnings.warn(
                f"Found keys that are not in the model state dict but in the checkpoint: {list(result.unexpected_keys)}",
                stacklevel=3,
            )
    tensor = next((t for t in weights.values() if isinstance(t, torch.Tensor)), None)
    return module.to(tensor.device) if tensor is not None else module
