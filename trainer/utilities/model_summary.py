"""Lightning's `lightning.pytorch.utilities.model_summary`: `ModelSummary(model, max_depth)`
(printed, it is the table `enable_model_summary` logs), `summarize` and the count formatting.

Example:
    >>> import torch
    >>> from trainer.utilities.model_summary import ModelSummary
    >>> summary = ModelSummary(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()), max_depth=1)
    >>> summary.total_parameters, summary.trainable_parameters, summary.layer_names
    (8, 8, ['0', '1'])
"""

from __future__ import annotations

import torch

from trainer.logging.summary import human_count, summarize as _table

__all__ = ["ModelSummary", "summarize", "get_human_readable_count", "get_formatted_model_size"]


class ModelSummary:
    """The layers of `model` down to `max_depth` (-1: all, 0: none) and its parameter counts."""

    def __init__(self, model: torch.nn.Module, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth=...) expected -1 or an int >= 0. Received: {max_depth!r}.")
        self._model = model
        self._max_depth = max_depth

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def _layers(self) -> list[tuple[str, torch.nn.Module]]:
        if self._max_depth == 0:
            return []
        return [(name, module) for name, module in self._model.named_modules()
                if name and (self._max_depth == -1 or name.count(".") < self._max_depth)]

    @property
    def layer_names(self) -> list[str]:
        return [name for name, _ in self._layers()]

    @property
    def layer_types(self) -> list[str]:
        return [type(module).__name__ for _, module in self._layers()]

    @property
    def param_nums(self) -> list[int]:
        return [sum(p.numel() for p in module.parameters()) for _, module in self._layers()]

    @property
    def total_parameters(self) -> int:
        return sum(p.numel() for p in self._model.parameters())

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self._model.parameters() if p.requires_grad)

    @property
    def model_size(self) -> float:
        """The parameters' size in MB."""
        return sum(p.numel() * p.element_size() for p in self._model.parameters()) / 1e6

    def __str__(self) -> str:
        return _table(self._model, max_depth=self._max_depth)

    def __repr__(self) -> str:
        return str(self)


def summarize(lightning_module: torch.nn.Module, max_depth: int = 1) -> ModelSummary:
    """`ModelSummary(lightning_module, max_depth)` (print it for the table)."""
    return ModelSummary(lightning_module, max_depth=max_depth)


def get_human_readable_count(number: int) -> str:
    """1234 -> '1.2 K', 2e6 -> '2.0 M'; below a thousand the number and two spaces, as Lightning's."""
    text = human_count(number)
    return text if text[-1].isalpha() else f"{text}  "


def get_formatted_model_size(total_model_size: float) -> str:
    return f"{total_model_size:,.3f}"
