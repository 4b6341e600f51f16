"""Copying and swapping a module's tensors as one step: all of them, or (on an error) none.

A weight-averaging callback puts the average into the module and back, tensor by tensor. A
checkpoint written after an error or an interrupt inside that loop would hold a mix of the two
sets of weights; on any exception (an interrupt included) these helpers put every tensor back
before it propagates (a swap is undone by swapping again; a one-way copy keeps a copy of what
it overwrites). Run them inside `trainer.uninterruptible()` so that Ctrl-C waits for the end
instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["copy_all", "swap_all"]


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
