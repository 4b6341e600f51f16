"""`trainer._accelerator_connector`: the one answer of Lightning's private connector that
callbacks written for Lightning read (`is_distributed`, as Lightning Bolts' online evaluators
do before wrapping their own model in DDP), and for any other attribute an error saying what to
read instead."""

from __future__ import annotations

from typing import Any

__all__ = ["AcceleratorConnector"]


class AcceleratorConnector:
    """Read-only: `is_distributed` is True under a DDP or FSDP strategy, as Lightning's."""

    def __init__(self, strategy: Any) -> None:
        self._strategy = strategy

    @property
    def is_distributed(self) -> bool:
        from trainer.strategies.lightning import DDPStrategy, FSDPStrategy

        return isinstance(self._strategy, (DDPStrategy, FSDPStrategy))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"trainer._accelerator_connector.{name}: Lightning's private connector has no such attribute here "
            "(only `is_distributed`). Expected the public reads: `trainer.strategy` (its `root_device`, "
            "`world_size`, `global_rank`), `trainer.accelerator`, `trainer.precision`, `trainer.num_devices`."
        )
