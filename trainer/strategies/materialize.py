"""A model built on the meta device (`with torch.device("meta"):` in `configure_model`), made real
after FSDP has sharded it: `to_empty` (each rank allocates its shards only), then each module's
`reset_parameters()`.

Each module's initialization runs on whole tensors (one module's at a time), from the global
generator, and each rank keeps its shard of them: the weights are the ones `reset_parameters()`
gives in one process, on every device. (Run on the shards themselves, as PyTorch's recipe does,
the draws depend on DTensor's random-number support: on a CPU mesh every rank draws the same
values for its own shard, so the ranks' rows of a weight repeat each other.)

The modules that hold meta tensors of their own are initialized in `modules()` order (outermost
first); one without `reset_parameters()` is an error before anything is allocated, as is a
model with some tensors on the meta device and others not (`to_empty` would drop the real
ones' values).
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
            _reset_whole(sub, device)


def _reset_whole(module: torch.nn.Module, device: torch.device) -> None:
    """`module.reset_parameters()` on whole tensors standing in for its own sharded parameters
    (one module's at a time: a root module's would otherwise mean the whole model), then this
    rank's shard of each copied into them. Buffers are not sharded: reset in place. A
    `reset_parameters()` that also resets the modules inside it draws for their shards there;
    they are reset again, whole, in their turn."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    sharded = {name: p for name, p in module.named_parameters(recurse=False) if isinstance(p, DTensor)}
    for name, p in sharded.items():
        setattr(module, name, torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=device),
                                                 requires_grad=p.requires_grad))
    try:
        module.reset_parameters()  # type: ignore[operator]
        whole: dict[str, torch.Tensor] = {name: getattr(module, name).detach() for name in sharded}
    finally:
        for name, p in sharded.items():
            setattr(module, name, p)
    for name, p in sharded.items():
        # Rank 0's whole tensor, each rank keeping its shard: the ranks agree even where their
        # generators do not (as DDP starts every rank from rank 0's weights).
        p.copy_(distribute_tensor(whole[name], p.device_mesh, p.placements))  # scattered from rank 0


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
