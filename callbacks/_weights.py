"""Copying and swapping a module's tensors as one step: all of them, or (on an error) none.

A weight-averaging callback puts the average into the module and back, tensor by tensor. A
checkpoint written after an error or an interrupt inside that loop would hold a mix of the two
sets of weights; on any exception (an interrupt included) these helpers put every tensor back
before it propagates (a swap is undone by swapping again; a one-way copy keeps a copy of what
it overwrites). Run them inside `trainer.uninterruptible()` so that Ctrl-C waits for the end
instead.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["Rollback", "copy_all", "swap_all"]


def copy_all(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`target <- source` for every `(target, source)` pair, all or nothing."""
    with torch.no_grad():
        held = [target.detach().clone() for target, _ in pairs]  # a failure here changes nothing
        try:
            for target, source in pairs:
                target.detach().copy_(source.detach())
        except BaseException:
            for (target, _), kept in zip(pairs, held):
                target.detach().copy_(kept)
            raise


def swap_all(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`a <-> b` for every `(a, b)` pair, all or nothing, holding one spare tensor at a time: on an
    exception the pair being swapped is put back, then the pairs already swapped are swapped again."""
    with torch.no_grad():
        done, held, a_written = 0, None, False
        try:
            for a, b in pairs:
                held, a_written = None, False
                held = a.detach().clone()
                a.detach().copy_(b.detach())
                a_written = True  # b's value is in a from here on
                b.detach().copy_(held)
                done += 1
        except BaseException:
            if done < len(pairs) and held is not None:
                a, b = pairs[done]
                if a_written:
                    b.detach().copy_(a.detach())
                a.detach().copy_(held)
            for a, b in pairs[:done]:
                spare = a.detach().clone()
                a.detach().copy_(b.detach())
                b.detach().copy_(spare)
            raise


class Rollback:
    """What a longer change of a module (SWA's final transfer and its BatchNorm pass) may leave
    half done, kept to put back: the module's state (on the CPU), every global random stream
    and the generators a loader draws from. `restore()` makes it as if the change never began,
    so the checkpoint written on an interrupt holds the state the change starts from and a
    resume runs it again, whole, from the same random streams."""

    def __init__(self, module: torch.nn.Module, loader: Any = None) -> None:
        self.module = module
        self.state = {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
        self.python = random.getstate()
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        try:
            import numpy as np

            self.numpy: Any = np.random.get_state()
        except ImportError:  # pragma: no cover - numpy comes with torch's usual installs
            self.numpy = None
        holders = [loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None),
                   getattr(getattr(loader, "batch_sampler", None), "sampler", None)]
        generators = {id(g): g for g in (getattr(h, "generator", None) for h in holders) if isinstance(g, torch.Generator)}
        self.generators = [(g, g.get_state()) for g in generators.values()]

    def restore(self) -> None:
        with torch.no_grad():
            self.module.load_state_dict(self.state)
        random.setstate(self.python)
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda)
        if self.numpy is not None:
            import numpy as np

            np.random.set_state(self.numpy)
        for generator, state in self.generators:
            generator.set_state(state)
