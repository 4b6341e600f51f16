"""What the optional loggers share: a clear error when their library is missing, and
hyperparameters as plain data a tracker stores."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from trainer.logging.tensorboard import hparam_value

__all__ = ["require", "plain_params"]

_EXTRAS = {"wandb": "wandb", "mlflow": "mlflow"}


def require(module: str, user: str) -> None:
    """Raise ImportError naming the pip extra when `module` is not installed (it is imported
    later, when the logger starts its run).

    Example:
        >>> require("json", "a test")
        >>> require("no_such_tracker", "NoSuchLogger")
        Traceback (most recent call last):
        ...
        ImportError: NoSuchLogger needs the no_such_tracker package, which is not installed. Install it with: pip install no_such_tracker
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails to import, or sys.modules[module] = None
        found = False
    if not found:
        extra = _EXTRAS.get(module)
        how = f"pip install 'loopwright[{extra}]' (or pip install {module})" if extra else f"pip install {module}"
        raise ImportError(f"{user} needs the {module} package, which is not installed. Install it with: {how}")


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
