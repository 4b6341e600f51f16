"""Run a function on rank 0 only, and report from rank 0 only (Lightning's
`lightning.pytorch.utilities.rank_zero`).

The rank is read when the decorated function is called, from the variables torchrun and
SLURM set (`RANK`, `LOCAL_RANK`, `SLURM_PROCID`, `JSM_NAMESPACE_RANK`, in Lightning's order);
a process outside any launcher is rank 0. Code that sets `rank_zero_only.rank` itself (as
Lightning's Trainer does) wins over the environment.

Example:
    >>> from trainer.utilities import rank_zero_only
    >>> @rank_zero_only
    ... def report(text):
    ...     return f"rank 0 says {text}"
    >>> report("hello")
    'rank 0 says hello'
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

__all__ = ["rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_debug"]

log = logging.getLogger("trainer")

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
T = TypeVar("T")


def _rank() -> int:
    chosen = getattr(rank_zero_only, "rank", None)
    if chosen is not None:
        return int(chosen)
    for name in _RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None:
            return int(value)
    return 0


@overload
def rank_zero_only(fn: Callable[..., T]) -> Callable[..., T | None]: ...
@overload
def rank_zero_only(fn: Callable[..., T], default: T) -> Callable[..., T]: ...
def rank_zero_only(fn: Callable[..., Any], default: Any = None) -> Callable[..., Any]:
    """Decorate `fn` so that it runs on global rank 0 only; other ranks get `default`."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if _rank() == 0:
            return fn(*args, **kwargs)
        return default

    return wrapped


rank_zero_only.rank = None  # type: ignore[attr-defined]  # None: read the environment at each call


def rank_zero_info(message: Any, *args: Any, stacklevel: int = 2, **kwargs: Any) -> None:
    """`logging.info` on logger "trainer", from rank 0 only."""
    if _rank() == 0:
        log.info(message, *args, stacklevel=stacklevel, **kwargs)


def rank_zero_debug(message: Any, *args: Any, stacklevel: int = 2, **kwargs: Any) -> None:
    """`logging.debug` on logger "trainer", from rank 0 only."""
    if _rank() == 0:
        log.debug(message, *args, stacklevel=stacklevel, **kwargs)


def rank_zero_warn(message: str | Warning, stacklevel: int = 2, category: type[Warning] = UserWarning, **kwargs: Any) -> None:
    """`warnings.warn` from rank 0 only (Lightning's signature)."""
    if _rank() == 0:
        warnings.warn(message, category=category, stacklevel=stacklevel, **kwargs)
