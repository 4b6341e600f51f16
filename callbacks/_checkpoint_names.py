"""`ModelCheckpoint`'s file names and arguments: the `filename` pattern (`{epoch}`, `{step}`, logged
metrics with a format spec) rendered into a name, and the check of every argument at construction.

Example:
    >>> from callbacks._checkpoint_names import _render
    >>> _render("{epoch}-{val/loss:.2f}", {"epoch": 3, "val/loss": 0.5}, insert_names=True)
    'epoch=3-val_loss=0.50'
"""

from __future__ import annotations

import os
import re
from typing import Any

_PLACEHOLDER = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
_BUILTIN = ("epoch", "step")
_DEFAULT_NAME = "{epoch}-{step}"


def _render(filename: str, values: dict[str, Any], insert_names: bool = False) -> str:
    def substitute(match: re.Match[str]) -> str:
        text = format(values[match.group(1)], match.group(2) or "")
        return f"{match.group(1)}={text}" if insert_names else text

    return _PLACEHOLDER.sub(substitute, filename).replace("/", "_").replace(os.sep, "_")


def _validate(filename: str, monitor: str | None, mode: str, save_top_k: int, save_last: Any,
              every_n_train_steps: int | None, every_n_epochs: int | None) -> None:
    if mode not in ("min", "max"):
        raise ValueError(f"ModelCheckpoint(mode=...) expected 'min' or 'max'. Received: {mode!r}.")
    if not isinstance(save_top_k, int) or isinstance(save_top_k, bool) or save_top_k < -1:
        raise ValueError(
            f"ModelCheckpoint(save_top_k=...) expected an int >= -1 (-1: keep all, 0: none). Received: {save_top_k!r}."
        )
    if monitor is None and save_top_k > 1:
        raise ValueError(
            f"ModelCheckpoint(save_top_k={save_top_k}) needs monitor=... to rank files. Expected "
            "save_top_k in (-1, 0, 1) without a monitor, or pass monitor='val/loss' (for example)."
        )
    if save_last not in (None, True, False, "link"):
        raise ValueError(f"ModelCheckpoint(save_last=...) expected True, False, None or 'link' (last.ckpt as a symlink "
                         f"to the newest file). Received: {save_last!r}.")
    if monitor is not None and (not isinstance(monitor, str) or not monitor):
        raise ValueError(f"ModelCheckpoint(monitor=...) expected a metric name or None. Received: {monitor!r}.")
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"ModelCheckpoint({name}=...) expected an int >= 0 (0: never) or None. Received: {value!r}.")
    if not isinstance(filename, str) or not filename or filename.count("{") != filename.count("}"):
        raise ValueError(f"ModelCheckpoint(filename=...) expected a non-empty name with balanced braces. Received: {filename!r}.")
    for match in _PLACEHOLDER.finditer(filename):
        sample: float | int = 0 if match.group(1) in _BUILTIN else 0.0
        try:
            format(sample, match.group(2) or "")
        except ValueError:
            raise ValueError(
                f"ModelCheckpoint(filename={filename!r}): the format spec {match.group(2)!r} of "
                f"{{{match.group(1)}}} does not apply to a {type(sample).__name__}. Expected e.g. '{{val/loss:.3f}}'."
            ) from None
