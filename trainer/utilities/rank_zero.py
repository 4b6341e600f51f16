"""Lightning's import path `lightning.pytorch.utilities.rank_zero`: rank-zero-only functions
and reports, which live with the strategies (`trainer/strategies/rank_zero.py`) since a
strategy sets the process's rank on them."""

from __future__ import annotations

from trainer.strategies.rank_zero import (
    LightningDeprecationWarning,
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

__all__ = [
    "rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_debug", "rank_zero_deprecation",
    "rank_prefixed_message", "WarningCache", "LightningDeprecationWarning",
]
