"""What the optional loggers share: a clear error when their library is missing, and
hyperparameters as plain data a tracker stores."""

from __future__ import annotations

import importlib.util

from trainer.logging.params import plain_params

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
