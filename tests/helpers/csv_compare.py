"""Our `metrics.csv` next to Lightning's, for a project trained under both.

The files are compared on Lightning's columns (the Trainer's own `train/...` scalars are
extra here, and rows holding nothing else are dropped). Two documented differences are
mapped (docs/lightning.md): during `fit` Lightning writes the Trainer's rows (those with an
`epoch`) at the step's 0-based index, here at `global_step`, one more; rows a callback writes
itself (LearningRateMonitor's) and those after `fit` are at `global_step` in both.
"""

from __future__ import annotations

import csv
import io

__all__ = ["as_lightning_writes"]


def as_lightning_writes(ours: str, theirs: str, epochs_fitted: int) -> tuple[str, str]:
    """`(ours, theirs)` as CSV text on Lightning's columns, Lightning's fit-time steps as
    `global_step`. `epochs_fitted` is `trainer.current_epoch` after `fit` (rows of later
    `validate`/`test` calls carry it)."""
    their_rows = list(csv.DictReader(io.StringIO(theirs)))
    columns = list(their_rows[0])
    for row in their_rows:
        if row["epoch"] and int(row["epoch"]) < epochs_fitted:
            row["step"] = str(int(row["step"]) + 1)
    mine = [{k: row.get(k, "") for k in columns} for row in csv.DictReader(io.StringIO(ours))]
    mine = [row for row in mine if any(row[k] for k in columns if k not in ("epoch", "step"))]

    def text(rows: list[dict[str, str]]) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    return text(mine), text(their_rows)
