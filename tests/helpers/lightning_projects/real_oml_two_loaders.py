"""Metric learning validated on two loaders, from OML-Team/open-metric-learning (its folder
`oml/Lightning/` is written here capitalised: `oml/Lightning/modules/extractor.py`:
`ExtractorModule`; `oml/Lightning/callbacks/metric.py`: `MetricValCallback`; the README
example `docs/readme/examples_source/extractor/train_2loaders_val.md`: one
`MetricValCallback` per validation loader, `loader_idx=0` and `1`, `num_sanity_val_steps=0`,
`trainer.validate(pl_model, dataloaders=(val_loader_1, val_loader_2))`).

Kept as written: `ExtractorModule` (the criterion's loss logged as a Python float with
`on_step=True, on_epoch=True` and `batch_size`, the criterion's `last_logs` through `log_dict`
on step only, the scheduler's `get_last_lr()` logged as `lr`, `validation_step(batch,
batch_idx, *_)` returning the batch merged with its embeddings, `predict_step` reusing it,
`configure_optimizers` returning `[optimizer], [{"scheduler", "interval", "frequency"}]` with an
optimizer and scheduler built outside the module, the removed hooks `get_progress_bar_dict`
and `on_epoch_start` left in), and `MetricValCallback` whole: it counts the expected samples
from `trainer.val_dataloaders[dataloader_idx].dataset` in `on_validation_batch_start`, feeds
the step's returned dict to the metric in `on_validation_batch_end`, and logs the metrics from
the callback through `pl_module.log_dict(..., rank_zero_only=True, add_dataloader_idx=True)`
on each loader's last batch.
Substituted: the ViT extractor is a two-layer MLP with OML's `extract`; `EmbeddingMetrics`
is a short metric with OML's interface (`setup`, `update_data`, `compute_metrics`: CMC@1 of
the nearest other embedding and the mean embedding norm); `TripletLossWithMiner` with
`AllTripletsMiner` is a short all-triplets loss keeping OML's `criterion_name` and
`last_logs`; `flatten_dict` is written here; the data are 24 training and 2 x 8 validation
points of four classes. The README's driver validates only: a one-epoch `fit` over the same
two validation loaders runs first, then the README's `validate`, then `predict`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import torch
from torch import nn
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data import DataLoader, Dataset

import trainer as pl  # as in Lightning.pytorch
from trainer import Callback
from trainer.utilities.types import STEP_OUTPUT

INPUT_TENSORS_KEY, LABELS_KEY, EMBEDDINGS_KEY, INDEX_KEY = "input_tensors", "labels", "embeddings", "idx"


def flatten_dict(d: Dict[str, Any], parent_key: str = "", sep: str = "/") -> Dict[str, Any]:
    items = []
    for k, v in d.items():
        new_key = parent_key + sep + str(k) if parent_key else str(k)
        if isinstance(v, dict):
            items.extend(flatten_dict(v, new_key, sep=sep).items())
        else:
            items.append((new_key, v))
    return dict(items)


class Extractor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x):
        return self.net(x)

    def extract(self, x):
        return self.forward(x)


class TripletLossWithMiner(nn.Module):
    criterion_name = "triplet"

    def __init__(self, margin: float = 0.1):
        super().__init__()
        self.margin = margin
        self.last_logs: Dict[str, float] = {}

    def forward(self, features, labels):
        same = labels[:, None] == labels[None, :]
        dist = torch.cdist(features, features)
        a, p, n = torch.where(same[:, :, None] & ~same[:, None, :] & ~torch.eye(len(labels), dtype=torch.bool)[:, :, None])
        loss = torch.relu(dist[a, p] - dist[a, n] + self.margin)
        self.last_logs = {"active_tri": float((loss > 0).float().mean()), "pos_dist": float(dist[a, p].mean()),
                          "neg_dist": float(dist[a, n].mean())}
        return loss.mean()


class EmbeddingMetrics:
    def __init__(self, dataset):
        self.dataset = dataset

    def setup(self, num_samples):
        self.num_samples, self.embeddings, self.ids = num_samples, [], []

    def update_data(self, embeddings, ids):
        self.embeddings.append(embeddings.detach()), self.ids.append(ids)

    def compute_metrics(self):
        emb, ids = torch.cat(self.embeddings), torch.cat(self.ids)
        labels = self.dataset.labels[ids]
        dist = torch.cdist(emb, emb) + torch.eye(len(emb)) * 1e9
        cmc = (labels[dist.argmin(1)] == labels).float().mean()
        return {"OVERALL": {"cmc": {1: cmc}, "norm": {"mean": emb.norm(dim=1).mean()}}}


class ExtractorModule(pl.LightningModule):
    embeddings_key: str

    def __init__(
        self,
        extractor,
        criterion: Optional[nn.Module] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        scheduler=None,
        scheduler_interval: str = "step",
        scheduler_frequency: int = 1,
        input_tensors_key: str = INPUT_TENSORS_KEY,
        labels_key: str = LABELS_KEY,
        embeddings_key: str = EMBEDDINGS_KEY,
        scheduler_monitor_metric: Optional[str] = None,
        freeze_n_epochs: int = 0,
    ):
        pl.LightningModule.__init__(self)

        self.model = extractor
        self.criterion = criterion
        self.optimizer = optimizer

        self.monitor_metric = scheduler_monitor_metric
        self.scheduler = scheduler
        self.scheduler_interval = scheduler_interval
        self.scheduler_frequency = scheduler_frequency

        self.input_tensors_key = input_tensors_key
        self.labels_key = labels_key
        self.embeddings_key = embeddings_key

        self.freeze_n_epochs = freeze_n_epochs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        embeddings = self.model(x)
        return embeddings

    def training_step(self, batch: Dict[str, Any], batch_idx: int) -> torch.Tensor:
        embeddings = self.model(batch[self.input_tensors_key])
        bs = len(embeddings)

        loss = self.criterion(embeddings, batch[self.labels_key])
        loss_name = (getattr(self.criterion, "criterion_name", "") + "_loss").strip("_")
        self.log(loss_name, loss.item(), prog_bar=True, batch_size=bs, on_step=True, on_epoch=True)

        if hasattr(self.criterion, "last_logs"):
            self.log_dict(self.criterion.last_logs, prog_bar=False, batch_size=bs, on_step=True, on_epoch=False)

        if self.scheduler is not None:
            self.log("lr", self.scheduler.get_last_lr()[0], prog_bar=True, batch_size=bs, on_step=True, on_epoch=False)

        return loss

    def validation_step(self, batch: Dict[str, Any], batch_idx: int, *_: Any) -> Dict[str, Any]:
        embeddings = self.model.extract(batch[self.input_tensors_key])
        return {**batch, **{self.embeddings_key: embeddings}}

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, *_: Any) -> Dict[str, Any]:
        return self.validation_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        if self.scheduler is None:
            return self.optimizer
        else:
            scheduler = {
                "scheduler": self.scheduler,
                "interval": self.scheduler_interval,
                "frequency": self.scheduler_frequency,
            }
            if isinstance(self.scheduler, ReduceLROnPlateau):
                scheduler["monitor"] = self.monitor_metric
            return [self.optimizer], [scheduler]

    def get_progress_bar_dict(self) -> Dict[str, Any]:
        tqdm_dict = super().get_progress_bar_dict()
        tqdm_dict.pop("v_num", None)
        return tqdm_dict

    def on_epoch_start(self) -> None:
        if self.freeze_n_epochs > 0:
            if self.current_epoch >= self.freeze_n_epochs:
                self.model.unfreeze()
            else:
                self.model.freeze()


class MetricValCallback(Callback):
    def __init__(
        self,
        metric,
        log_images: bool = False,
        loader_idx: int = 0,
        samples_in_getitem: int = 1,
    ):
        self.metric = metric
        self.log_images = log_images

        self.loader_idx = loader_idx
        self.samples_in_getitem = samples_in_getitem

        self._expected_samples = 0
        self._collected_samples = 0
        self._ready_to_accumulate = False

    def _calc_expected_samples(self, trainer: pl.Trainer, dataloader_idx: int = 0) -> int:
        loaders = (
            [trainer.val_dataloaders] if isinstance(trainer.val_dataloaders, DataLoader) else trainer.val_dataloaders
        )
        return self.samples_in_getitem * len(loaders[dataloader_idx].dataset)

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if dataloader_idx == self.loader_idx:
            if not self._ready_to_accumulate:
                self._expected_samples = self._calc_expected_samples(trainer=trainer, dataloader_idx=dataloader_idx)
                self._collected_samples = 0

                self.metric.setup(num_samples=self._expected_samples)
                self._ready_to_accumulate = True

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Optional[STEP_OUTPUT],
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if dataloader_idx == self.loader_idx:
            assert self._ready_to_accumulate

            self.metric.update_data(outputs[pl_module.embeddings_key], ids=outputs[INDEX_KEY])  # todo 522:

            self._collected_samples += len(outputs[list(outputs.keys())[0]])
            if self._collected_samples > self._expected_samples:
                self._raise_computation_error()

            is_last_expected_batch = self._collected_samples == self._expected_samples
            if is_last_expected_batch:
                self.calc_and_log_metrics(pl_module)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._ready_to_accumulate = False
        if self._collected_samples != self._expected_samples:
            self._raise_computation_error()

    def calc_and_log_metrics(self, pl_module: pl.LightningModule) -> None:
        metrics = self.metric.compute_metrics()
        metrics = flatten_dict(metrics)
        pl_module.log_dict(metrics, rank_zero_only=True, add_dataloader_idx=True)

    def _raise_computation_error(self) -> Exception:
        raise ValueError(
            f"Incorrect calculation for {self.metric.__class__.__name__} metric. "
            f"Inconsistent number of samples, obtained: {self._collected_samples}, "
            f"expected: {self._expected_samples}, "
            f"'samples_in_getitem': {self.samples_in_getitem}."
        )


class Points(Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.arange(n) % 4
        self.x = torch.randn(n, 6, generator=g) + self.labels[:, None].float()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {INPUT_TENSORS_KEY: self.x[i], LABELS_KEY: self.labels[i], INDEX_KEY: i}


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    pl.seed_everything(0)
    extractor = Extractor()
    criterion = TripletLossWithMiner(margin=0.1)
    optimizer = torch.optim.SGD(extractor.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    train_loader = DataLoader(Points(24, 1), batch_size=8, shuffle=True)

    val_dataset_1, val_dataset_2 = Points(8, 2), Points(8, 3)
    val_loader_1 = DataLoader(val_dataset_1, batch_size=3)
    val_loader_2 = DataLoader(val_dataset_2, batch_size=4)
    metric_callback_1 = MetricValCallback(metric=EmbeddingMetrics(dataset=val_dataset_1), log_images=True, loader_idx=0)
    metric_callback_2 = MetricValCallback(metric=EmbeddingMetrics(dataset=val_dataset_2), log_images=True, loader_idx=1)

    pl_model = ExtractorModule(extractor, criterion, optimizer, scheduler)
    trainer = pl.Trainer(max_epochs=1, callbacks=[metric_callback_1, metric_callback_2], num_sanity_val_steps=0,
                         accelerator="cpu", precision=precision, default_root_dir=str(root_dir), logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=1)
    trainer.fit(pl_model, train_loader, (val_loader_1, val_loader_2))
    fit_metrics = dict(trainer.callback_metrics)
    validated = trainer.validate(pl_model, dataloaders=(val_loader_1, val_loader_2), verbose=False)
    predicted = trainer.predict(pl_model, val_loader_1)
    return {"model": pl_model, "trainer": trainer, "val": fit_metrics, "validate": validated,
            "predicted": torch.cat([out[EMBEDDINGS_KEY] for out in predicted]),
            "predicted_keys": sorted(predicted[0]), "lr": optimizer.param_groups[0]["lr"]}
