"""What a run logs of its model when fit starts: the one-line `fit_summary` (parameters,
precision, device, effective batch size), and the model summary `Trainer(enable_model_summary=True)`
logs as Lightning's `ModelSummary` prints it: the layers to `max_depth`, their parameter counts
and train/eval mode (and, for a module with an `example_input_array`, the in and out sizes
`example_sizes` records), then trainable, frozen and total parameters and their size in MB.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.precision import Precision
    from trainer.strategies import Strategy

__all__ = ["summarize", "example_sizes", "human_count", "fit_summary", "run_hyperparameters", "lightning_hyperparameters",
           "SummaryHost"]

#: Lightning's mark for a size the example input did not reach (or that is not a tensor's).
UNKNOWN_SIZE = "?"


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


def _size_of(value: Any) -> Any:
    """Lightning's size notation: a tensor's shape as a list, nested for lists and tuples."""
    if hasattr(value, "shape"):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_size_of(each) for each in value]
    return UNKNOWN_SIZE


def example_sizes(module: torch.nn.Module, device: torch.device, autocast: contextlib.AbstractContextManager[Any],
                  move: Callable[[Any], Any] | None = None) -> dict[str, tuple[Any, Any]] | None:
    """Run the module's `example_input_array` through it once, as Lightning's model summary does,
    and return each submodule's first input and output sizes (None: no example input).

    Like Lightning's: in eval mode (every submodule's mode restored after), under `no_grad` and
    `autocast`, the example moved to `device` (where the module computes; by `move`, the batch transfer
    hooks, when the module or its DataModule has them); a tuple or list is passed as
    positional arguments, a dict as keyword arguments. It is a real forward: what the forward
    draws from the random streams or changes in place happens, as under Lightning.
    """
    example = getattr(module, "example_input_array", None)
    if example is None:
        return None
    sizes: dict[str, tuple[Any, Any]] = {}
    handles = []
    for name, sub in module.named_modules():
        if not name or isinstance(sub, torch.jit.ScriptModule):
            continue

        def record(_: Any, args: Any, kwargs: Any, out: Any, name: str = name) -> None:
            if name not in sizes:  # a module called twice keeps its first sizes (Lightning's)
                inputs = (*args, *kwargs.values()) if kwargs else args
                sizes[name] = (_size_of(inputs[0] if len(inputs) == 1 else inputs), _size_of(out))

        handles.append(sub.register_forward_hook(record, with_kwargs=True))
    from trainer._utils import move_to_device

    example = move(example) if move is not None else move_to_device(example, device)
    modes = {sub: sub.training for sub in module.modules()}
    module.eval()
    try:
        with torch.no_grad(), autocast:
            if isinstance(example, (list, tuple)):
                module(*example)
            elif isinstance(example, dict):
                module(**example)
            else:
                module(example)
    finally:
        for handle in handles:
            handle.remove()
        for sub, mode in modes.items():
            sub.training = mode
    return sizes


def summarize(module: torch.nn.Module, max_depth: int = 1, sizes: dict[str, tuple[Any, Any]] | None = None) -> str:
    """The summary table of `module`: layers down to `max_depth` (0: none, -1: all); with
    `sizes` (`example_sizes`), Lightning's "In sizes" and "Out sizes" columns."""
    if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < -1:
        raise ValueError(f"ModelSummary(max_depth=...) expected an int >= -1 (-1: every layer). Received: {max_depth!r}.")
    rows: list[tuple[str, ...]] = []
    for name, layer in module.named_modules():
        depth = name.count(".") + 1
        if not name or (max_depth != -1 and depth > max_depth):
            continue
        count = sum(p.numel() for p in layer.parameters())
        row: tuple[str, ...] = (name, type(layer).__name__, human_count(count), "train" if layer.training else "eval")
        if sizes is not None:
            size_in, size_out = sizes.get(name, (UNKNOWN_SIZE, UNKNOWN_SIZE))
            row += (str(size_in), str(size_out))
        rows.append(row)
    parameters = list(module.parameters())
    total = sum(p.numel() for p in parameters)
    trainable = sum(p.numel() for p in parameters if p.requires_grad)
    megabytes = sum(p.numel() * p.element_size() for p in parameters) / 1e6
    modes = [m.training for m in module.modules()]
    lines: list[str] = []
    if rows:
        header: tuple[str, ...] = ("Name", "Type", "Params", "Mode")
        if sizes is not None:
            header += ("In sizes", "Out sizes")
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


def lightning_hyperparameters(module: torch.nn.Module, datamodule: Any) -> dict[str, Any]:
    """What Lightning gives a logger of the user's own (a `Logger` subclass) as hyperparameters:
    the module's `hparams_initial`, merged with the DataModule's when there is one.

    Raises:
        ValueError: a name is in both with different values (Lightning's error).
    """
    params = dict(getattr(module, "hparams_initial", {}) or {})
    if datamodule is not None:
        theirs = dict(getattr(datamodule, "hparams_initial", {}) or {})
        clash = sorted(k for k in set(params) & set(theirs) if params[k] is not theirs[k] and params[k] != theirs[k])
        if clash:
            raise ValueError(
                f"The hyperparameters {clash} are in both the module's and the DataModule's hparams with different "
                "values, so the logger can't be given one value for each. Rename one of them, or save it in one place."
            )
        params.update(theirs)
    return params
