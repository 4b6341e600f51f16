"""`Trainer(activation_checkpointing=...)`: chosen submodules keep only their inputs for the
backward pass and run their forward again there (`torch.utils.checkpoint`, non-reentrant).

Which submodules:

- a list of class names or classes (or their import paths, e.g. `torch.nn.TransformerEncoderLayer`):
  every submodule of those classes (a transformer's block);
  one inside another chosen one is left to it;
- True: a size rule, like FSDP's units' (trainer/strategies/fsdp.py), with a threshold of
  1,000,000 parameters (an int instead of True sets it): from the outside in, a submodule
  holding at least the threshold and at most half of the model's parameters is chosen and
  not looked into; one holding more than half (the model's trunk) is looked into. On a
  transformer that picks its blocks: checkpointing the whole trunk would recompute all of it
  at once and save little at the peak.

Each chosen module's `forward` is replaced on the instance by one that runs the class's
forward under `torch.utils.checkpoint.checkpoint(..., use_reentrant=False,
preserve_rng_state=True)`: dropout draws the same masks when it runs again, autocast is
recorded, and the global random streams end where they would without it, so the weights
equal those of a run without checkpointing bit for bit. The module tree, parameter names
and state-dict keys do not change (checkpoints move freely between runs with and without
it). With gradients off (evaluation) the forward runs as it is.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    >>> checkpoint_activations(net, ["Linear"])
    ['0', '2']
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import pydoc
import types
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from trainer.logging.throughput import recomputing

__all__ = ["MIN_PARAMS", "checkpoint_activations", "chosen_modules"]

log = logging.getLogger("trainer")

#: The size rule's threshold for `activation_checkpointing=True` (FSDP's `min_shard_params`).
MIN_PARAMS = 1_000_000
_MARK = "_trainer_checkpointed_forward"


def _checkpointed_forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    forward = type(self).forward
    if not torch.is_grad_enabled():
        return forward(self, *args, **kwargs)
    if torch.compiler.is_compiling():  # compiled: no FLOP counter runs, and no context_fn for dynamo
        return checkpoint(forward, self, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)
    return checkpoint(forward, self, *args, use_reentrant=False, preserve_rng_state=True, context_fn=_contexts, **kwargs)


def _contexts() -> tuple[Any, Any]:
    """The forward as it is; the recomputation in backward not counted as model FLOPs."""
    return contextlib.nullcontext(), recomputing()


def chosen_modules(module: torch.nn.Module, setting: Any) -> list[tuple[str, torch.nn.Module]]:
    """The (name, submodule) pairs `setting` chooses, outermost only, in `named_modules` order."""
    named = [(name, sub) for name, sub in module.named_modules() if sub is not module]
    if setting is True or (isinstance(setting, int) and not isinstance(setting, bool)):
        threshold = MIN_PARAMS if setting is True else int(setting)
        half = sum(p.numel() for p in module.parameters()) / 2
        picked, stack = [], [("", module)]
        while stack:  # from the outside in: the first submodule of a branch that fits is chosen
            prefix, parent = stack.pop()
            for child_name, child in reversed(list(parent.named_children())):
                name = f"{prefix}.{child_name}" if prefix else child_name
                size = sum(p.numel() for p in child.parameters())
                if threshold <= size <= half:
                    picked.append((name, child))
                elif size > half:
                    stack.append((name, child))
        order = {id(sub): i for i, (_, sub) in enumerate(named)}
        picked.sort(key=lambda item: order[id(item[1])])
    else:
        wanted = {_class_name(c) for c in setting}
        picked = [(name, sub) for name, sub in named if type(sub).__name__ in wanted]
        missing = wanted - {type(sub).__name__ for _, sub in picked}
        if missing:
            classes = sorted({type(sub).__name__ for _, sub in named})
            hints = [f" Did you mean {close[0]!r} for {name!r}?" for name in sorted(missing)
                     if (close := difflib.get_close_matches(name.rpartition(".")[2], classes, n=1, cutoff=0.6))]
            raise ValueError(
                f"Trainer(activation_checkpointing={sorted(wanted)}): {type(module).__name__} has no submodule of "
                f"class {', '.join(sorted(missing))}. Expected class names among its submodules' "
                f"({', '.join(classes)}).{''.join(hints)}"
            )
    outermost: list[tuple[str, torch.nn.Module]] = []
    for name, sub in picked:
        if not any(name.startswith(prefix + ".") for prefix, _ in outermost):
            outermost.append((name, sub))
    return outermost


def _class_name(spec: Any) -> str:
    """A class, a class name, or (as a YAML file names classes) its import path: `torch.nn.Linear`,
    `mypkg.models.Block`. An import path that does not import stays as written (the error shows it)."""
    if not isinstance(spec, str):
        return str(spec.__name__)
    if "." in spec:
        found = pydoc.locate(spec)
        if isinstance(found, type):
            return found.__name__
    return spec


def checkpoint_activations(module: torch.nn.Module, setting: bool | int | Sequence[Any]) -> list[str]:
    """Checkpoint the submodules `setting` chooses (once per module); returns their names."""
    if getattr(module, _MARK, None) is not None:
        return list(getattr(module, _MARK))
    names = []
    for name, sub in chosen_modules(module, setting):
        if type(sub).forward is torch.nn.Module.forward:
            continue  # no forward of its own (a container called by its parent's code): nothing to run
        sub.forward = types.MethodType(_checkpointed_forward, sub)  # type: ignore[method-assign]
        names.append(name)
    if not names:
        log.warning("Trainer(activation_checkpointing=%r) chose no submodule of %s: none holds between the threshold "
                    "and half of its parameters. Name the block class instead, e.g. activation_checkpointing=['Block'].",
                    setting, type(module).__name__)
    object.__setattr__(module, _MARK, tuple(names))
    return names
