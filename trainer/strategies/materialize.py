"""A model built on the meta device (`with torch.device("meta"):` in `configure_model`), made real
after FSDP has sharded it: PyTorch's FSDP2 recipe, `to_empty` then each module's
`reset_parameters()`, so each rank allocates and initializes its shards only.

The modules that hold meta tensors of their own are initialized by their `reset_parameters()`, in
`modules()` order (outermost first); one that has none is an error before anything is allocated,
as is a model with some tensors on the meta device and others not (`to_empty` would drop the
real ones' values).
"""

from __future__ import annotations

import itertools

import torch


def _own_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [t for t in itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False)) if t is not None]


def meta_modules(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The submodules (with their names) holding meta tensors of their own, outermost first."""
    return [(name, sub) for name, sub in module.named_modules() if any(t.is_meta for t in _own_tensors(sub))]


def materialize(module: torch.nn.Module, sharded: torch.nn.Module, device: torch.device) -> None:
    """Allocate the meta tensors of `module` on `device` (through `sharded`, the FSDP root that
    holds it, so each rank allocates its shards) and initialize them with `reset_parameters()`.
    Nothing to do when none are on the meta device."""
    found = meta_modules(module)
    if not found:
        return
    real = [f"{name}.{key}" if name else key for name, sub in module.named_modules()
            for key, t in itertools.chain(sub.named_parameters(recurse=False), sub.named_buffers(recurse=False))
            if t is not None and not t.is_meta]
    if real:
        raise ValueError(
            f"{type(module).__name__} has tensors on the meta device and others not ({', '.join(real[:3])} "
            f"{'are' if len(real) > 1 else 'is'} real). FSDP makes a "
            "meta-device model real with to_empty(), which would drop the values of the others. Expected every "
            "parameter and buffer on the meta device (create the whole model under `with torch.device('meta'):` in "
            "configure_model) or none."
        )
    missing = [f"{name or '(the module itself)'} ({type(sub).__name__})" for name, sub in found
               if not callable(getattr(sub, "reset_parameters", None))]
    if missing:
        raise ValueError(
            f"{type(module).__name__} was built on the meta device, and FSDP initializes each module holding "
            f"meta tensors with its reset_parameters() once sharded. Received modules without one: "
            f"{', '.join(missing)}. Expected a reset_parameters() method on each (initializing its own "
            "parameters and buffers), or the model built on a real device."
        )
    sharded.to_empty(device=device)
    with torch.no_grad():
        for _, sub in found:
            sub.reset_parameters()  # type: ignore[operator]


def refuse_meta(module: torch.nn.Module, strategy: str, device: torch.device) -> None:
    """A strategy that moves the whole model to its device: a meta tensor has nothing to move."""
    found = meta_modules(module)
    if found:
        names = ", ".join(f"{name or '(the module itself)'} ({type(sub).__name__})" for name, sub in found[:3])
        raise ValueError(
            f"{type(module).__name__} has parameters or buffers on the meta device, in {names}"
            f"{' and more' if len(found) > 3 else ''}. strategy='{strategy}' moves the whole model to {device}, "
            "and a meta tensor has no values to move. Expected real tensors: build the model on the CPU (or under "
            "`with trainer.init_module():`), or use strategy='fsdp', which makes a meta-device model real after "
            "sharding it (each module's reset_parameters())."
        )
