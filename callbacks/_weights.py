"""Copying and swapping a module's tensors as one step: all of them, or (on an error) none.

A weight-averaging callback puts the average into the module and back, tensor by tensor. A
checkpoint written after an error or an interrupt inside that loop would hold a mix of the two
sets of weights; these helpers first copy what they overwrite, and on any exception (an
interrupt included) put every tensor back before it propagates. Run them inside
`trainer.uninterruptible()` so that Ctrl-C waits for the end instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["copy_all", "swap_all"]


def _copy(target: torch.Tensor, source: torch.Tensor) -> None:
    """One tensor's copy (a single place, so tests can interrupt the loop at any index)."""
    target.copy_(source)


def copy_all(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`target <- source` for every `(target, source)` pair, all or nothing."""
    with torch.no_grad():
        held = [target.detach().clone() for target, _ in pairs]  # a failure here changes nothing
        try:
            for target, source in pairs:
                _copy(target.detach(), source.detach())
        except BaseException:
            for (target, _), kept in zip(pairs, held):
                target.detach().copy_(kept)
            raise


def swap_all(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`a <-> b` for every `(a, b)` pair, all or nothing."""
    with torch.no_grad():
        held = [a.detach().clone() for a, _ in pairs]  # a failure here changes nothing
        first_done = False
        try:
            for a, b in pairs:
                _copy(a.detach(), b.detach())
            first_done = True
            for (_, b), kept in zip(pairs, held):
                _copy(b.detach(), kept)
        except BaseException:
            if first_done:  # every `a` holds its `b`: put the b's back from there
                for a, b in pairs:
                    b.detach().copy_(a.detach())
            for (a, _), kept in zip(pairs, held):
                a.detach().copy_(kept)
            raise
