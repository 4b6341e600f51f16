"""What a run logs of its model when fit starts: the one-line `fit_summary` (parameters,
precision, device, effective batch size), and the model summary `Trainer(enable_model_summary=True)`
logs as Lightning's `ModelSummary` prints it: the layers to `max_depth`, their parameter counts
and train/eval mode, then trainable, frozen and total parameters and their size in MB.

Example:
    >>> import torch
    >>> from trainer.logging.summary import summarize
    >>> print(summarize(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())))
      | Name | Type   | Params | Mode
    -------------------------------------
    0 | 0    | Linear | 16     | train
    1 | 1    | ReLU   | 0      | train
    -------------------------------------
    16        Trainable params
    0         Non-trainable params
    16        Total params
    0.000     Total estimated model params size (MB)
    3         Modules in train mode
    0         Modules in eval mode
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.precision import Precision
    from trainer.strategies import Strategy

__all__ = ["summarize", "example_forward", "human_count", "fit_summary", "run_hyperparameters", "SummaryHost"]


def human_count(number: float) -> str:
    """1234 -> '1.2 K', 2e6 -> '2.0 M' (Lightning's abbreviations)."""
    labels = ["", "K", "M", "B", "T"]
    digits = int(math.floor(math.log10(number)) + 1) if number > 0 else 1
    groups = min(int(math.ceil(digits / 3)), len(labels))
    number = number * 10 ** (-3 * (groups - 1))
    if groups == 1:
        return f"{int(number):,d}"
    if number >= 100:
        return f"{int(number):,d} {labels[groups - 1]}"
    return f"{number:,.1f} {labels[groups - 1]}"


def example_forward(module: torch.nn.Module, device: torch.device, autocast: Any = None) -> None:
    """Run the module's `example_input_array` through it once, as Lightning's `ModelSummary`
    does when fit starts (on every rank) to read its layers' input and output sizes: in eval
    mode, without gradients, under the precision's autocast (`autocast`, a context manager),
    then each submodule back in its mode. A forward that draws random numbers (noise added to
    the input, say) moves torch's stream there, so the run after it draws what Lightning's draws.
    Nothing happens without an example input.
    """
    example = getattr(module, "example_input_array", None)
    if example is None:
        return
    from trainer._utils import move_to_device

    example = move_to_device(example, device)
    modes = [(each, each.training) for each in module.modules()]
    module.eval()
    try:
        with torch.no_grad(), autocast if autocast is not None else contextlib.nullcontext():
            if isinstance(example, (list, tuple)):
                module(*example)
            elif isinstance(example, dict):
                module(**example)
            else:
                module(example)
    finally:
        for each, training in modes:
            each.training = training


def summarize(module: torch.nn.Module, max_depth: int = 1) -> str:
    """The summary table of `module`: layers down to `max_depth` (0: none, -1: all)."""
    if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < -1:
        raise ValueError(f"ModelSummary(max_depth=...) expected an int >= -1 (-1: every layer). Received: {max_depth!r}.")
    rows: list[tuple[str, str, str, str]] = []
    for name, layer in module.named_modules():
        depth = name.count(".") + 1
        if not name or (max_depth != -1 and depth > max_depth):
            continue
        count = sum(p.numel() for p in layer.parameters())
        rows.append((name, type(layer).__name__, human_count(count), "train" if layer.training else "eval"))
    parameters = list(module.parameters())
    total = sum(p.numel() for p in parameters)
    trainable = sum(p.numel() for p in parameters if p.requires_grad)
    megabytes = sum(p.numel() * p.element_size() for p in parameters) / 1e6
    modes = [m.training for m in module.modules()]
    lines: list[str] = []
    if rows:
        header = ("Name", "Type", "Params", "Mode")
        index_width = len(str(len(rows) - 1))
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        rule = "-" * (index_width + sum(widths) + 3 * len(widths) + 3)

        def line(first: str, cells: tuple[str, ...]) -> str:
            return " | ".join([first.ljust(index_width)] + [c.ljust(w) for c, w in zip(cells, widths)]).rstrip()

        lines += [line("", header), rule, *(line(str(i), row) for i, row in enumerate(rows)), rule]
    lines += [
        f"{human_count(trainable):<10}Trainable params",
        f"{human_count(total - trainable):<10}Non-trainable params",
        f"{human_count(total):<10}Total params",
        f"{megabytes:<10,.3f}Total estimated model params size (MB)",
        f"{sum(modes):<10}Modules in train mode",
        f"{len(modes) - sum(modes):<10}Modules in eval mode",
    ]
    return "\n".join(lines)


class SummaryHost(Protocol):
    """The run (its context, `trainer/loops/context.py`) as `fit_summary` sees it."""

    @property
    def args(self) -> TrainerArgs: ...
    @property
    def strategy(self) -> Strategy: ...
    @property
    def precision(self) -> Precision: ...
    @property
    def train_loader(self) -> Any: ...


def fit_summary(run: SummaryHost, module: torch.nn.Module) -> str:
    """The one-line summary the Trainer logs (INFO) when a run starts."""
    total = trainable = 0
    for parameter in module.parameters():
        total += parameter.numel()
        trainable += parameter.numel() if parameter.requires_grad else 0
    args, world = run.args, run.strategy.world_size
    batch = getattr(run.train_loader, "batch_size", None)
    if isinstance(batch, int) and not isinstance(batch, bool):
        k = args.accumulate_grad_batches
        effective = (
            f"effective batch size {batch * k * world} "
            f"(batch_size {batch} x accumulate_grad_batches {k} x world_size {world})"
        )
    else:
        effective = "effective batch size unknown (the loader has no batch_size)"
    return (
        f"Training {type(module).__name__}: {total:,} parameters ({trainable:,} trainable) | "
        f"precision {run.precision.name} | device {run.strategy.device} | {effective}"
    )


def run_hyperparameters(module: torch.nn.Module, args: TrainerArgs, precision: Any,
                        experiment: dict[str, Any] | None) -> dict[str, Any]:
    """What a run's loggers get once as hyperparameters: the module's and the Trainer's
    arguments; for a YAML run (`experiment`), its model/data/seed instead of the module's."""
    params: dict[str, Any] = {
        "module": dict(getattr(module, "hparams", {}) or {}),
        # storage_options may hold credentials: never logged
        "trainer": {k: v for k, v in args.model_dump().items() if k not in ("callbacks", "logger", "storage_options")},
    }
    params["trainer"]["precision"] = getattr(precision, "name", str(args.precision))
    if experiment:
        # Each value once: the YAML's model/data/seed; its trainer section is the one above.
        params = {"trainer": params["trainer"], "experiment": {k: v for k, v in experiment.items() if k != "trainer"}}
    return params
