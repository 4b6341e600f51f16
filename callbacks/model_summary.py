"""`ModelSummary`: the model's layers and parameter counts, logged when fit starts (Lightning's)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from trainer import Callback
from trainer.logging.summary import example_sizes, summarize

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["ModelSummary"]

log = logging.getLogger("trainer.callbacks")


class ModelSummary(Callback):
    """Logs (INFO) the summary table of the module when fit starts, on rank 0: the layers down
    to `max_depth` (0: none, -1: every layer), their parameter counts and train/eval mode, then
    trainable, frozen and total parameters and their size in MB. The Trainer logs the
    `max_depth=1` table by itself (`enable_model_summary=True`); this callback replaces it.

    Example:
        >>> from callbacks import ModelSummary
        >>> ModelSummary(max_depth=2).max_depth
        2
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth=...) expected an int >= -1 (-1: every layer). Received: {max_depth!r}.")
        if summarize_kwargs:
            raise ValueError(
                f"ModelSummary({', '.join(summarize_kwargs)}=...): not supported here. Expected max_depth only."
            )
        self.max_depth = max_depth
        self.summary: str | None = None  # the last table logged

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self.max_depth == 0:  # Lightning's: nothing, not even the example input's forward
            return
        # On every rank, as Lightning's: the example input's forward (its in/out sizes) may draw
        # from the random streams, and each rank's streams must move alike.
        sizes = example_sizes(module, trainer.strategy.root_device, trainer.precision.autocast())
        if not trainer.is_global_zero:
            return
        self.summary = summarize(module, self.max_depth, sizes=sizes)
        log.info("\n%s", self.summary)
