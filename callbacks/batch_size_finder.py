"""`BatchSizeFinder`: Lightning's batch-size search is not offered; constructing it says what to do."""

from __future__ import annotations

from typing import Any

from trainer import Callback
from trainer.tuner import Tuner

__all__ = ["BatchSizeFinder"]


def _tuner_message() -> str:
    try:
        Tuner.scale_batch_size(None)  # type: ignore[arg-type]  # it only raises, with the advice
    except NotImplementedError as error:
        return str(error).split(": ", 1)[-1]
    return "pick the batch size by hand."  # pragma: no cover - the Tuner always raises


class BatchSizeFinder(Callback):
    """Not offered here, as `Tuner.scale_batch_size` is not: constructing it raises.

    Raises:
        ValueError: always, saying what to do instead.

    Example:
        >>> from callbacks import BatchSizeFinder
        >>> BatchSizeFinder()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ValueError: BatchSizeFinder is not offered here: ...
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(f"BatchSizeFinder is not offered here (nor Tuner.scale_batch_size): {_tuner_message()} "
                         "Remove the callback from Trainer(callbacks=[...]).")
