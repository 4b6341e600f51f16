"""A second set of Lightning-style projects: only the imports changed -> Lightning's weights.

Each project in tests/helpers/lightning_projects2 combines features real projects use
together (torchmetrics in epoch-end hooks, OneCycleLR sized by `estimated_stepping_batches`,
a DataModule that writes its files in `prepare_data` with `reload_dataloaders_every_n_epochs`,
a GAN with two schedulers, SWA over BatchNorm, a seq2seq model with accumulation, a VAE with
`load_from_checkpoint`, a contrastive model under bf16-mixed). Both versions run in this
process on the same seed and data; every weight is compared with `torch.equal`, and so are
the steps, the epochs and every metric Lightning reports.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import lightning_source
from tests.helpers.lightning_projects2 import PROJECTS, load_project, project_path

pytest.importorskip("lightning")


def run(name: str, framework: str, root: Path, precision: str = "32-true", **kwargs: Any) -> dict[str, Any]:
    return load_project(name, framework).main(root / framework, precision, **kwargs)


def assert_same_weights(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)
    different = [key for key in mine if not torch.equal(mine[key], other[key])]
    assert not different, f"weights differ from Lightning's: {different}"


def assert_same_metrics(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Every metric Lightning reports has our value, exactly (ours may report more: the
    Trainer's own train/* scalars)."""
    expected = {key: float(value) for key, value in theirs.items()}
    assert expected
    assert {key: (float(ours[key]) if key in ours else None) for key in expected} == expected


def assert_same_run(ours: dict[str, Any], theirs: dict[str, Any], *, steps_differ_by: int = 0) -> None:
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step + steps_differ_by == theirs["trainer"].global_step
    assert ours["trainer"].current_epoch + (1 if steps_differ_by else 0) == theirs["trainer"].current_epoch


@pytest.mark.parametrize("name", PROJECTS)
def test_only_the_import_lines_differ(name: str) -> None:
    ours = project_path(name).read_text()
    changed = [line for line in difflib.ndiff(ours.split("\n"), lightning_source(ours).split("\n")) if line[:2] in ("- ", "+ ")]
    assert changed and "lightning" not in ours
    assert all(line[2:].lstrip().startswith(("import ", "from ")) for line in changed)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_metrics_classifier(precision: str, tmp_path: Path) -> None:
    """torchmetrics objects in training_step and computed in on_validation_epoch_end,
    OneCycleLR sized by `self.trainer.estimated_stepping_batches` in configure_optimizers,
    EarlyStopping and a top-2 ModelCheckpoint on the torchmetrics value, a CSVLogger,
    LearningRateMonitor, then `trainer.test(ckpt_path="best")` without the model."""
    ours, theirs = run("metrics_classifier", "ours", tmp_path, precision), run("metrics_classifier", "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert ours["trainer"].current_epoch < 6  # EarlyStopping ended it, in both
    assert ours["model"].hparams.total_steps is None and ours["trainer"].estimated_stepping_batches == 6 * 8
    assert_same_metrics(ours["val"], {k: v for k, v in theirs["val"].items() if not k.startswith("lr-")})
    assert_same_metrics(ours["test"], theirs["test"])
    mine, other = ours["checkpoint"], theirs["checkpoint"]
    assert Path(mine.best_model_path).name == Path(other.best_model_path).name
    assert float(mine.best_model_score) == float(other.best_model_score)
    # The files on disk (Lightning's best_k_models is rewound by test(ckpt_path=...), which
    # restores the callback's state from that file; ours is left as the fit ended it).
    assert sorted(p.name for p in Path(mine.dirpath).iterdir()) == sorted(p.name for p in Path(other.dirpath).iterdir())


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_datamodule_reload_and_predict(precision: str, tmp_path: Path) -> None:
    """A DataModule whose train loader changes each epoch (reload_dataloaders_every_n_epochs=1,
    a batch size growing with `trainer.current_epoch`), limit_train_batches=0.5,
    check_val_every_n_epoch=2, a sanity check; then predict with a BasePredictionWriter, and
    test through `LightningDataModule.from_datasets`."""
    ours, theirs = run("datamodule_predict", "ours", tmp_path, precision), run("datamodule_predict", "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert all(torch.equal(a, b) for a, b in zip(ours["predictions"], theirs["predictions"], strict=True))
    assert [(i, idx) for i, idx, _ in ours["written"]] == [(i, idx) for i, idx, _ in theirs["written"]]
    assert torch.equal(ours["loaded"]["predictions"], theirs["loaded"]["predictions"])
    stages = {"TrainerFn.FITTING": "fit", "TrainerFn.PREDICTING": "predict"}  # Lightning passes an enum

    def calls(result: dict[str, Any]) -> list[str]:  # val_dataloader: ours at each reload, Lightning's lazily
        named = [call.split(":")[0] + ":" + stages.get(call.split(":", 1)[1], call.split(":", 1)[1]) if ":" in call else call
                 for call in result["calls"]]
        return [call for call in named if call != "val_dataloader"]

    assert calls(ours) == calls(theirs)
    assert [c for c in calls(ours) if c.startswith("train_dataloader")] == [f"train_dataloader:{e}" for e in range(4)]


def test_reload_without_the_extra_draw_would_differ(tmp_path: Path) -> None:
    """The comparison can fail: Lightning opens a reloaded train loader twice (one seed drawn
    more); without reloading, both draw once per epoch and still agree."""
    ours = run("datamodule_predict", "ours", tmp_path, reload_dataloaders_every_n_epochs=0)
    theirs = run("datamodule_predict", "lightning", tmp_path, reload_dataloaders_every_n_epochs=0)
    assert_same_run(ours, theirs)
    reloaded = run("datamodule_predict", "ours", tmp_path / "again")
    assert not torch.equal(reloaded["model"].net[0].weight, ours["model"].net[0].weight)


#: Beside weights, steps and `callback_metrics`: what else each project returns to compare.
EXTRA = {"gan_schedule": ("lrs",), "seq2seq": ("validate",), "contrastive": ("lr",)}


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_gan_seq2seq_and_contrastive(name: str, precision: str, tmp_path: Path) -> None:
    """A GAN with two schedulers, a seq2seq model with padding and accumulation, a contrastive model."""
    ours, theirs = run(name, "ours", tmp_path, precision), run(name, "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    for key in EXTRA[name]:
        if isinstance(theirs[key], dict):
            assert_same_metrics(ours[key], theirs[key])
        else:
            assert ours[key] == theirs[key]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_vae_and_its_best_checkpoint(precision: str, tmp_path: Path) -> None:
    ours, theirs = run("vae", "ours", tmp_path, precision), run("vae", "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert Path(ours["checkpoint"].best_model_path).name == Path(theirs["checkpoint"].best_model_path).name
    assert_same_weights(ours["best"], theirs["best"])


def test_swa_over_batchnorm(tmp_path: Path) -> None:
    """Lightning's SWA adds one epoch (and counts one step) for its BatchNorm pass; the
    weights, and what `validate` reports with them, are the same (docs/weight_averaging.md).
    Norm clipping: with clip by value Lightning's BatchNorm pass fails on torch 2.13
    (`clip_grad_value_` over no gradients), where ours runs (next test)."""
    ours = run("swa_batchnorm", "ours", tmp_path, clip_algorithm="norm")
    theirs = run("swa_batchnorm", "lightning", tmp_path, clip_algorithm="norm")
    assert_same_run(ours, theirs, steps_differ_by=1)
    assert_same_metrics(ours["validate"], theirs["validate"])


def test_swa_with_value_clipping_runs(tmp_path: Path) -> None:
    result = run("swa_batchnorm", "ours", tmp_path)
    assert result["trainer"].current_epoch == 5 and result["validate"]["val_mse"] > 0
    assert (tmp_path / "ours" / "csv" / "version_0" / "metrics.csv").read_text().count("\n") > 30  # log_every_n_steps=1


def _sampled_orders(module_base: type, trainer_class: type, **quiet: Any) -> list[list[float]]:
    """The sample order of each epoch of a one-process run whose loader has a user-made
    DistributedSampler (shuffle=True)."""
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    class Recorder(module_base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list[list[float]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen.append(batch[0].flatten().tolist())
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.arange(8.0).view(8, 1))
    model = Recorder()
    trainer_class(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, **quiet).fit(model, DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=1, rank=0)))
    return model.seen


def test_a_distributed_sampler_is_told_the_epoch_on_one_device_too() -> None:
    """Lightning calls `set_epoch` on the train loader's sampler every epoch whatever the
    strategy, so a DistributedSampler made by the user reshuffles on one device as well."""
    import lightning

    import trainer as ours

    theirs = _sampled_orders(lightning.LightningModule, lightning.Trainer, accelerator="cpu", devices=1)
    mine = _sampled_orders(ours.Module, ours.Trainer, device="cpu")
    assert mine == theirs and len({tuple(order) for order in mine}) == 3  # three different orders
