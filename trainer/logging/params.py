"""Hyperparameters as the loggers write them: flattened names, values a viewer accepts, plain
nested data for YAML, and the `hparams.yaml` file beside a run's logs."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


__all__ = ["flatten_params", "hparam_value", "plain_params", "write_atomic", "write_hparams_yaml"]


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a/b": 1}`."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_params(value, f"{name}/"))
        else:
            out[name] = value
    return out


def hparam_value(value: Any) -> bool | int | float | str:
    """A value the HParams plugin accepts: numbers, strings and bools; anything else as text.

    Modules and tensors become a short description, never their full repr.
    """
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if value is None:
        return "None"
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{type(value).__name__}(shape={tuple(shape)}, dtype={value.dtype})"
    if hasattr(value, "parameters") and hasattr(value, "state_dict"):
        return type(value).__name__
    text = str(value)
    return text if len(text) <= 250 else text[:247] + "..."


def plain_params(value: Any) -> Any:
    """Nested hyperparameters as dicts, lists, numbers, strings, bools and None; anything else
    (a module, a tensor, an object) as the short text `hparam_value` gives it.

    Example:
        >>> import torch
        >>> plain_params({"lr": 0.1, "net": {"layers": [2, 3]}, "w": torch.zeros(2)})
        {'lr': 0.1, 'net': {'layers': [2, 3]}, 'w': 'Tensor(shape=(2,), dtype=torch.float32)'}
    """
    if isinstance(value, Mapping):
        return {str(k): plain_params(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_params(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return hparam_value(value)


def write_hparams_yaml(folder: Path, params: Mapping[str, Any]) -> Path:
    """`folder/hparams.yaml`: the hyperparameters nested as given (values YAML can't hold become
    text), written atomically; Lightning's loggers keep the same file beside their logs."""
    import yaml  # on first use: `import trainer` stays light

    path = Path(folder) / "hparams.yaml"
    write_atomic(path, yaml.safe_dump(plain_params(dict(params)), sort_keys=False, allow_unicode=True))
    return path


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file in the same folder renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", newline="", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
