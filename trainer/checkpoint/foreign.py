"""What to write instead, for a `torch.save` file that `ckpt_path` cannot continue.

Two kinds of file are common in hand-written projects: a bare `model.state_dict()`, and
PyTorch's "general checkpoint" (a dict such as `{"epoch": ..., "model_state_dict": ...,
"optimizer_state_dict": ..., "loss": ...}`). Neither holds what an exact resume needs (random
streams, data position, loop counters), so the Trainer does not guess; the message says which
entries hold the weights and the optimizer's state and how to load them.

Example:
    >>> import torch
    >>> layer = torch.nn.Linear(2, 1)
    >>> print(foreign_advice({"epoch": 2, "model_state_dict": layer.state_dict()}))  # doctest: +ELLIPSIS
    It holds the entries ['epoch', 'model_state_dict'] (a hand-written checkpoint): ...
"""

from __future__ import annotations

from typing import Any

import torch


def _is_weights(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, dict) and "state" in value and "param_groups" in value


def foreign_advice(state: Any) -> str:
    """How to load `state` (what a file without our marker held) by hand."""
    bare = "to load bare weights, use module.load_state_dict(torch.load(path, weights_only=True))."
    if not isinstance(state, dict) or _is_weights(state):
        return bare[0].upper() + bare[1:]
    keys = [k for k in state if isinstance(k, str)]
    weights = [k for k in keys if _is_weights(state[k])]
    optimizers = [k for k in keys if _is_optimizer_state(state[k])]
    if not weights:
        return f"It holds the entries {keys[:8]}, none of them a model's state_dict."
    lines = [
        f"It holds the entries {keys[:8]} (a hand-written checkpoint): ckpt_path continues only files the "
        "Trainer wrote, which hold the random streams and the loop's position too. To continue this one, "
        f"load it yourself and pass no ckpt_path: ckpt = torch.load(path, weights_only=True); "
        f"module.load_state_dict(ckpt[{weights[0]!r}]) before fit",
    ]
    if optimizers:
        lines.append(f"; in configure_optimizers, optimizer.load_state_dict(ckpt[{optimizers[0]!r}]) "
                     "after building the optimizer")
    if "epoch" in keys:
        lines.append("; max_epochs counts the epochs still to train (the Trainer's epochs start at 0)")
    return "".join(lines) + "."
