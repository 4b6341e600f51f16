"""The evaluation loop shared by validation (inside fit), `validate`, `test` and `predict`."""

from __future__ import annotations

from typing import Any

import torch

from trainer._metrics import to_floats
from trainer._utils import length_of, move_to_device

__all__ = ["EvalLoop"]

_STEP = {"validation": "validation_step", "test": "test_step", "predict": "predict_step"}


class EvalLoop:
    """Runs one pass of `<stage>_step` in eval mode, without gradients, under autocast.

    The train/eval mode of every submodule is restored afterwards, so a submodule the
    user froze in eval mode stays that way.
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.stage: str | None = None  # None while training: `self.log` then defaults to per-step

    def run(self, loader: Any, stage: str) -> dict[str, float] | list[Any]:
        trainer = self.trainer
        module = trainer._module
        device = trainer.strategy.device
        step = getattr(module, _STEP[stage])
        modes = {sub: sub.training for sub in module.modules()}
        predictions: list[Any] = []
        module.eval()
        self.stage = stage
        hook_scope = "validation" if stage == "validation" else stage
        want_batch_hooks = stage == "validation"
        total = length_of(loader)
        with trainer._bookkeeping():
            trainer._io.progress_start_eval(stage, total)
        grad_mode = torch.inference_mode() if stage == "predict" else torch.no_grad()
        try:
            if stage != "predict":
                trainer._call(f"on_{hook_scope}_epoch_start")
            with grad_mode:
                for batch_idx, batch in enumerate(loader):
                    batch = move_to_device(batch, device)
                    if want_batch_hooks:
                        trainer._call("on_validation_batch_start", batch, batch_idx)
                    with trainer.precision.autocast():
                        output = step(batch, batch_idx)
                    if stage == "predict":
                        predictions.append(output)
                    if want_batch_hooks:
                        trainer._call("on_validation_batch_end", output, batch, batch_idx)
                    trainer._io.progress_advance_eval()
            if stage == "predict":
                return predictions
            # The module's epoch-end hook may still log (e.g. a metric computed over the
            # epoch), so it runs before the epoch closes; callbacks then see the results.
            trainer._dispatch.call_module(f"on_{hook_scope}_epoch_end")
            epoch_values = trainer._metrics.close_epoch(trainer.strategy.reduce_epoch)
            results = to_floats(epoch_values)
            trainer._io.log_eval(results)
            trainer._dispatch.call_callbacks(f"on_{hook_scope}_epoch_end", trainer, module)
            return results
        finally:
            self.stage = None
            with trainer._bookkeeping():
                trainer._io.progress_end_eval()
            for sub, mode in modes.items():
                sub.training = mode
