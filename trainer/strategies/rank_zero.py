"""Run a function on rank 0 only, and report from rank 0 only (Lightning's
`lightning.pytorch.utilities.rank_zero`).

`rank_zero_only.rank` is set when this module is imported, as Lightning's is: from the
variables torchrun and SLURM set (`RANK`, `LOCAL_RANK`, `SLURM_PROCID`, `JSM_NAMESPACE_RANK`,
in Lightning's order), 0 in a process outside any launcher. A multi-process strategy sets it to
the process's global rank once it knows it (when the Trainer is built), and code may set it
itself; the decorated functions read it when they are called.

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

__all__ = [
    "rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_debug", "rank_zero_deprecation",
    "rank_prefixed_message", "WarningCache", "LightningDeprecationWarning", "PossibleUserWarning",
]

log = logging.getLogger("trainer")

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
T = TypeVar("T")


def _environment_rank() -> int | None:
    """The rank a launcher put in the environment, None when there is none."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None:
            return int(value)
    return None


def _rank() -> int:
    chosen = getattr(rank_zero_only, "rank", None)
    if chosen is not None:
        return int(chosen)
    return _environment_rank() or 0  # set to None by hand: the environment decides at each call


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


rank_zero_only.rank = _environment_rank() or 0  # type: ignore[attr-defined]  # Lightning's: fixed at import


def rank_prefixed_message(message: str, rank: int | None) -> str:
    """`message` prefixed with `[rank: N] ` when `rank` is given (Lightning's format).

    Example:
        >>> rank_prefixed_message("saving", 1), rank_prefixed_message("saving", None)
        ('[rank: 1] saving', 'saving')
    """
    return message if rank is None else f"[rank: {rank}] {message}"


class LightningDeprecationWarning(DeprecationWarning):
    """The category of `rank_zero_deprecation`'s warnings (Lightning's name)."""


class PossibleUserWarning(UserWarning):
    """Lightning's category for a warning about a setting that may be a mistake (few DataLoader
    workers, a logging interval longer than the epoch, ...), which a script may silence with
    `warnings.filterwarnings("ignore", category=PossibleUserWarning)`. The Trainer here gives
    none of those warnings; a callback may use the category for its own."""


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


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 2, **kwargs: Any) -> None:
    """`rank_zero_warn` with the category `LightningDeprecationWarning`."""
    kwargs.setdefault("category", LightningDeprecationWarning)
    rank_zero_warn(message, stacklevel=stacklevel + 1, **kwargs)


class WarningCache(set[str]):
    """Warn or report each distinct message once, from rank 0 (Lightning's `WarningCache`).

    Example:
        >>> cache = WarningCache()
        >>> cache.info("once"); cache.info("once")
        >>> len(cache)
        1
    """

    def warn(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_warn(message, stacklevel=stacklevel, **kwargs)

    def deprecation(self, message: str, stacklevel: int = 6, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_deprecation(message, stacklevel=stacklevel, **kwargs)

    def info(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_info(message, stacklevel=stacklevel, **kwargs)
