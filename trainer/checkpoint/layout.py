"""Our checkpoint layout across versions: a file of an older version of ours gets the current
keys, in memory (`upgrade`, called by `format.load_checkpoint` on every file it reads).

Version 3 is the current one; Lightning's keys, which version 3 added beside ours, come from
`trainer/lightning/checkpoint.py`.
"""

from __future__ import annotations

from typing import Any

from trainer.lightning.checkpoint import add_lightning_keys

__all__ = ["upgrade"]


def upgrade(state: dict[str, Any]) -> None:
    """Give a file of an older format version the current keys (in memory; checked later
    by `check_layout`). 1: one bare optimizer and scheduler; 2: `lr_schedulers` held
    `{"class", "state"}` entries (now `schedulers`) and Lightning's keys were absent."""
    version = state.get("format_version")
    if not isinstance(version, int) or version >= 3:
        return
    if version < 2:
        for single, listed in (("optimizer", "optimizers"), ("lr_scheduler", "schedulers")):
            if listed not in state:
                value = state.get(single)
                state[listed] = [] if value is None else [{"class": None, "state": value}]
    elif "schedulers" not in state and "lr_schedulers" in state:
        state["schedulers"] = state.pop("lr_schedulers")
    add_lightning_keys(state, state.get("loop"))
