"""`trainer.fit(torch.compile(model))`: the module inside, run with that compilation, as Lightning does.

`torch.compile(module)` returns an `OptimizedModule` that wraps the module without being one of
its class, so its hooks and `configure_optimizers` are not on it. Lightning 2 (`from_compiled`)
takes the module out and gives it the compiled context on `forward` and on each step method
(`training_step`, `validation_step`, `test_step`, `predict_step`), as instance attributes; the
same is done here, once per module (a later `fit`/`test` with the same compiled object reuses
it). The weights are the module's own, so `state_dict()` keys carry no `_orig_mod.` prefix.

Example:
    >>> import torch
    >>> from trainer import Module
    >>> class Net(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layer = torch.nn.Linear(2, 1)
    >>> net = Net()
    >>> from_compiled(torch.compile(net, backend="eager")) is net
    True
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.module import Module

__all__ = ["from_compiled"]

_COMPILED_METHODS = ("forward", "training_step", "validation_step", "test_step", "predict_step")


def _optimized_module_type() -> type | None:
    dynamo = getattr(torch, "_dynamo", None)
    eval_frame = getattr(dynamo, "eval_frame", None) if dynamo is not None else None
    return getattr(eval_frame, "OptimizedModule", None)


def from_compiled(model: Any, compile_option: Any = False) -> Any:
    """`model` itself, or the `Module` a `torch.compile(...)` result wraps, with its `forward` and
    step methods compiled by that result's context. Anything else is returned as it is (the
    module check that follows names it).

    Raises:
        TypeError: the compiled object wraps a module that is not a `trainer.Module`.
        ValueError: `Trainer(compile=...)` is set too (one compilation, chosen once).
    """
    optimized = _optimized_module_type()
    if optimized is None or not isinstance(model, optimized):
        return model
    compiled: Any = model
    inner = dict(compiled.named_children()).get("_orig_mod")  # the wrapped module, its only child
    if not isinstance(inner, Module):
        raise TypeError(
            f"Expected a trainer.Module, or torch.compile(...) of one. Received: torch.compile(...) of "
            f"{type(inner).__name__}, a torch.nn.Module that is not a trainer.Module. Subclass trainer.Module "
            "(training_step and configure_optimizers) and compile that."
        )
    if compile_option:
        raise ValueError(
            f"Expected one way of compiling. Received: torch.compile({type(inner).__name__}) and "
            f"Trainer(compile={compile_option!r}). Pass the module itself with Trainer(compile=...), or the "
            "compiled module with Trainer(compile=False)."
        )
    context = compiled.dynamo_ctx
    state = inner.__dict__.get("_compiled_by")
    if state is not None and state[0] is context:
        return inner  # this compiled object was unwrapped before: its methods are compiled already
    originals = state[1] if state is not None else {name: getattr(inner, name) for name in _COMPILED_METHODS}
    for name, method in originals.items():
        setattr(inner, name, context(method))  # an instance attribute, as Lightning's from_compiled does
    object.__setattr__(inner, "_compiled_by", (context, originals))
    return inner
