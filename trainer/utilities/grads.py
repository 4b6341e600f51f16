"""`grad_norm`: each parameter's gradient norm and their total, to log from a hook.

Example:
    >>> import torch
    >>> layer = torch.nn.Linear(2, 1, bias=False)
    >>> layer(torch.ones(1, 2)).sum().backward()
    >>> {name: round(float(value), 4) for name, value in grad_norm(layer, norm_type=2).items()}
    {'grad_2.0_norm/weight': 1.4142, 'grad_2.0_norm_total': 1.4142}
"""

from __future__ import annotations

import torch

__all__ = ["grad_norm"]


def grad_norm(module: torch.nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """The `norm_type`-norm of each parameter's gradient, and of all of them as one vector
    (Lightning's keys: `grad_{p}_norm/{name}` and `grad_{p}_norm_total`). The values stay
    on the device, so `self.log_dict(grad_norm(self, 2))` in `on_before_optimizer_step` adds
    no host read per step.

    Raises:
        ValueError: `norm_type` is not positive (or "inf").
    """
    p = float(norm_type)
    if not p > 0:
        raise ValueError(f"grad_norm(norm_type=...) expected a positive number or 'inf'. Received: {norm_type!r}.")
    norms = {
        f"grad_{p}_norm{group_separator}{name}": parameter.grad.detach().norm(p)
        for name, parameter in module.named_parameters()
        if parameter.grad is not None
    }
    if norms:
        norms[f"grad_{p}_norm_total"] = torch.stack([value.float() for value in norms.values()]).norm(p)
    return norms
