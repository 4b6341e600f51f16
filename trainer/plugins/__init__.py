"""Lightning's plugins at Lightning's path (`from trainer.plugins import MixedPrecision`,
`trainer.plugins.environments.SLURMEnvironment`), for scripts that import them.

The Trainer takes no `plugins=`: what they configure in Lightning is an argument here, and
`Trainer(plugins=[...])` raises an error naming it for each one given (`MixedPrecision("16-mixed",
...)`: `precision="16-mixed"`; `SLURMEnvironment(auto_requeue=False)`: `requeue=False`;
`AsyncCheckpointIO()`: `async_checkpointing=True`; `TorchSyncBatchNorm()`: `sync_batchnorm=True`).
`plugins=None` or `[]` (Lightning's default) is accepted.

Example:
    >>> from trainer.plugins import MixedPrecision
    >>> MixedPrecision("bf16-mixed", "cuda").trainer_instead()
    "Trainer(precision='bf16-mixed')"
"""

from __future__ import annotations

from typing import Any

from trainer.plugins.environments import ClusterEnvironment, LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment

__all__ = [
    "ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment", "Precision", "MixedPrecision",
    "HalfPrecision", "DoublePrecision", "CheckpointIO", "TorchCheckpointIO", "AsyncCheckpointIO", "LayerSync",
    "TorchSyncBatchNorm",
]


class _Plugin:
    """A Lightning plugin: built as Lightning's, and names the Trainer argument that replaces it."""

    _instead = "nothing: remove it from plugins="

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def trainer_instead(self) -> str:
        return self._instead


class Precision(_Plugin):
    _instead = "Trainer(precision=...): 'fp32', 'bf16-mixed' or '16-mixed'"


class MixedPrecision(Precision):
    """Lightning's autocast plugin: `Trainer(precision=<its precision>)` here (a GradScaler of
    your own: `precision=trainer.AMP(init_scale=..., growth_interval=...)`)."""

    def __init__(self, precision: str, device: str, scaler: Any = None) -> None:
        super().__init__(precision, device, scaler)
        self.precision, self.device, self.scaler = precision, device, scaler

    def trainer_instead(self) -> str:
        if self.scaler is not None:
            return "Trainer(precision=AMP(init_scale=..., growth_factor=..., backoff_factor=..., growth_interval=...)), " \
                   "from trainer import AMP, with your GradScaler's settings"
        return f"Trainer(precision={self.precision!r})"


class HalfPrecision(Precision):
    _instead = "a mixed precision (precision='bf16-mixed' or '16-mixed'): weights stay float32 here"


class DoublePrecision(Precision):
    _instead = "model.double() and float64 batches, with precision='fp32'"


class CheckpointIO(_Plugin):
    _instead = "nothing: checkpoints are written atomically by the Trainer (storage_options=... for a bucket)"


class TorchCheckpointIO(CheckpointIO):
    pass


class AsyncCheckpointIO(CheckpointIO):
    _instead = "Trainer(async_checkpointing=True)"


class LayerSync(_Plugin):
    _instead = "Trainer(sync_batchnorm=True)"


class TorchSyncBatchNorm(LayerSync):
    pass
