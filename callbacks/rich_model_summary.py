"""`RichModelSummary`: the model summary drawn as a `rich` table (Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from callbacks.model_summary import ModelSummary
from trainer.logging.summary import example_sizes, human_count, summarize

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["RichModelSummary"]


def summary_rows(module: torch.nn.Module, max_depth: int) -> list[tuple[str, str, str, str, str]]:
    """The table's rows: index, name, type, parameter count and mode of each layer to `max_depth`.

    Example:
        >>> summary_rows(torch.nn.Sequential(torch.nn.Linear(3, 4)), 1)
        [('0', '0', 'Linear', '16', 'train')]
    """
    rows = []
    for name, layer in module.named_modules():
        if not name or (max_depth != -1 and name.count(".") + 1 > max_depth):
            continue
        count = sum(p.numel() for p in layer.parameters())
        rows.append((name, type(layer).__name__, human_count(count), "train" if layer.training else "eval"))
    return [(str(i), *row) for i, row in enumerate(rows)]


class RichModelSummary(ModelSummary):
    """`ModelSummary`'s table printed with `rich` when fit starts, on rank 0 (needs
    `pip install rich`, as in Lightning). `header_style` sets the header's rich style
    (Lightning's default "bold magenta"); the plain text is kept in `.summary` too.

    Raises:
        ImportError: when `rich` is not installed; use `ModelSummary` then.

    Example:
        >>> from callbacks import RichModelSummary  # doctest: +SKIP
        >>> RichModelSummary(max_depth=2).max_depth  # doctest: +SKIP
        2
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ImportError(
                "RichModelSummary draws with the `rich` package, which is not installed. Install it with "
                "`pip install rich`, or use callbacks.ModelSummary() (the plain table needs nothing)."
            ) from None
        unknown = set(summarize_kwargs) - {"header_style"}
        if unknown:
            raise ValueError(f"RichModelSummary({', '.join(sorted(unknown))}=...): not supported here. "
                             "Expected max_depth and header_style.")
        super().__init__(max_depth)
        self.header_style: str = summarize_kwargs.get("header_style", "bold magenta")

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self.max_depth == 0:
            return
        sizes = example_sizes(module, trainer.strategy.root_device, trainer.precision.autocast())  # every rank, as ModelSummary's
        if not trainer.is_global_zero:
            return
        self.summary = summarize(module, self.max_depth, sizes=sizes)
        self.print_table(module)

    def print_table(self, module: torch.nn.Module) -> None:
        """Print the table and the totals on rich's console."""
        from rich import get_console
        from rich.table import Table

        console = get_console()
        rows = summary_rows(module, self.max_depth)
        if rows:
            table = Table(header_style=self.header_style)
            table.add_column(" ", style="dim")
            table.add_column("Name", justify="left", no_wrap=True)
            table.add_column("Type")
            table.add_column("Params", justify="right")
            table.add_column("Mode")
            for row in rows:
                table.add_row(*row)
            console.print(table)
        parameters = list(module.parameters())
        total = sum(p.numel() for p in parameters)
        trainable = sum(p.numel() for p in parameters if p.requires_grad)
        megabytes = sum(p.numel() * p.element_size() for p in parameters) / 1e6
        modes = [m.training for m in module.modules()]
        grid = Table.grid(expand=True)
        grid.add_column()
        grid.add_column()
        grid.add_row(f"[bold]Trainable params[/]: {human_count(trainable):<10}")
        grid.add_row(f"[bold]Non-trainable params[/]: {human_count(total - trainable):<10}")
        grid.add_row(f"[bold]Total params[/]: {human_count(total):<10}")
        grid.add_row(f"[bold]Total estimated model params size (MB)[/]: {megabytes:<10,.3f}")
        grid.add_row(f"[bold]Modules in train mode[/]: {sum(modes)}")
        grid.add_row(f"[bold]Modules in eval mode[/]: {len(modes) - sum(modes)}")
        console.print(grid)
