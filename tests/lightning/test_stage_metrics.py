"""`trainer.logged_metrics` and `trainer.progress_bar_metrics` after validate/test/predict hold
that call's values only, as Lightning's (each run starts them empty): read after `test`, they
no longer show the fit's training values. Checked against Lightning in this process."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from tests.helpers.lightning_projects import lightning_source

pytest.importorskip("lightning")

RUNS = textwrap.dedent('''
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainer as L


    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("fit_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_sum", self.layer(batch[0]).sum(), prog_bar=True)

        def test_step(self, batch, batch_idx):
            self.log("test_sum", self.layer(batch[0]).sum())

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)


    def main():
        torch.manual_seed(0)
        loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)
        model = Model()
        trainer.fit(model, loader, loader)
        seen = {}
        for stage in ("validate", "test", "predict", "validate"):
            if stage == "predict":
                trainer.predict(model, loader)
            else:
                getattr(trainer, stage)(model, loader, verbose=False)
            seen[len(seen)] = {"logged": dict(trainer.logged_metrics), "bar": dict(trainer.progress_bar_metrics)}
        return {k: {kind: {name: float(v) for name, v in values.items()} for kind, values in entry.items()}
                for k, entry in seen.items()}
''')


def test_each_evaluation_shows_only_its_own_values() -> None:
    results = {}
    for framework in ("ours", "lightning"):
        source = RUNS if framework == "ours" else lightning_source(RUNS)
        namespace: dict[str, Any] = {"__name__": f"_stage_metrics_{framework}"}
        exec(compile(source, f"<stage metrics {framework}>", "exec"), namespace)
        results[framework] = namespace["main"]()
    ours, theirs = results["ours"], results["lightning"]
    assert theirs[1] == {"logged": {"test_sum": theirs[1]["logged"]["test_sum"]}, "bar": {}}
    assert ours == theirs
