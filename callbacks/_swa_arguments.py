"""The check of `StochasticWeightAveraging`'s arguments: every invalid one named, before a run starts."""

from __future__ import annotations

import math
from typing import Any

import torch


def _check_arguments(swa_lrs: Any, swa_epoch_start: Any, annealing_epochs: Any, annealing_strategy: Any,
                     avg_fn: Any, device: Any) -> list[str]:
    def positive(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0

    problems = []
    if not (positive(swa_lrs) or (isinstance(swa_lrs, (list, tuple)) and swa_lrs and all(positive(v) for v in swa_lrs))):
        problems.append(f"swa_lrs={swa_lrs!r}: expected a positive float, or a non-empty list of positive floats "
                        "(one per parameter group of the optimizer)")
    if isinstance(swa_epoch_start, bool) or not (
        (isinstance(swa_epoch_start, int) and swa_epoch_start >= 1)
        or (isinstance(swa_epoch_start, float) and 0.0 <= swa_epoch_start <= 1.0)
    ):
        problems.append(f"swa_epoch_start={swa_epoch_start!r}: expected an int >= 1 (the epoch, counted from 1) or "
                        "a float in [0, 1] (that fraction of max_epochs)")
    if isinstance(annealing_epochs, bool) or not isinstance(annealing_epochs, int) or annealing_epochs < 0:
        problems.append(f"annealing_epochs={annealing_epochs!r}: expected an int >= 0")
    if annealing_strategy not in ("cos", "linear"):
        problems.append(f"annealing_strategy={annealing_strategy!r}: expected 'cos' or 'linear'")
    if avg_fn is not None and not callable(avg_fn):
        problems.append(f"avg_fn={avg_fn!r}: expected None or a function (averaged, current, n_averaged) -> tensor")
    if device is not None:
        try:
            if isinstance(device, bool) or not isinstance(device, (torch.device, str)):
                raise TypeError
            torch.device(device)
        except (TypeError, RuntimeError):
            problems.append(f"device={device!r}: expected None, a torch.device or a device string such as 'cpu'")
    return problems
