"""A brain-slice registration model fine-tuned in milestones, from bkntr/brainways
(`src/brainways_reg_model/model/model.py`: `BrainwaysRegModel`; `utils/milestones_finetuning.py`:
`MilestonesFinetuning`; `model/metric_dict_input_wrapper.py`, `model/approx_acc.py`,
`utils/data.py`: `model_label_to_value`; `model/train.py`: the driver).

Kept as written: `MilestonesFinetuning(BaseFinetuning)` (the feature extractor frozen by hand
through `requires_grad`, its last five children unfrozen at the first milestone and the rest
at the second, each as a new Adam param group with `initial_denom_lr=10.0`, BatchNorm left
frozen: `train_bn=False`), `save_hyperparameters()` of a config object, a `MetricCollection` of
`MetricDictInputWrapper`-wrapped torchmetrics (`ApproxAccuracy`, `MeanAbsoluteError`, a
multiclass `Accuracy`) cloned with `train_`/`val_`/`test_` prefixes and logged by `log_dict`
with `batch_size`, the forward's per-output slices (including its `out_i` that never moves),
the masked NLL losses averaged with `torch.stack(...).mean()`, `val_loss` logged only outside
training, `configure_optimizers` building Adam over the trainable parameters only, and the
driver's `ModelCheckpoint(monitor=..., mode=...)` with `check_val_every_n_epoch`, then the
best checkpoint path read back.
Substituted: the ResNet-50 backbone is a seven-child conv/BatchNorm Sequential, the kornia
augmentation is additive noise (and its rotation label update is left out), the transform the
identity; the config is a small dataclass; the confidence head's training is off
(`train_confidence=False`, one of the config's own settings); the data are 24 synthetic
8x8 slices with their labels; sizes shrunk; the milestones are epochs 1 and 2 of three.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from torch import Tensor, nn, optim
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.utils.data import DataLoader, Dataset
from torchmetrics import Accuracy, MeanAbsoluteError, Metric, MetricCollection

import trainer as pl
from trainer.callbacks import BaseFinetuning, ModelCheckpoint
from trainer.utilities import rank_zero_info


@dataclass
class LabelParams:
    n_classes: int
    limits: Optional[tuple] = None
    label_names: Optional[list] = None


@dataclass
class OptConfig:
    lr: float = 1e-2
    weight_decay: float = 1e-4
    train_confidence: bool = False
    milestones: tuple = (1, 2)
    train_bn: bool = False
    max_epochs: int = 3
    check_val_every_n_epoch: int = 1
    loss_weights: dict = field(default_factory=lambda: {"ap": 1.0, "rot_frontal": 0.5, "hemisphere": 1.0})


@dataclass
class BrainwaysConfig:
    outputs: list = field(default_factory=lambda: ["ap", "rot_frontal", "hemisphere"])
    label_params: dict = field(default_factory=lambda: {
        "ap": LabelParams(n_classes=6, limits=(0, 528)),
        "rot_frontal": LabelParams(n_classes=4, limits=(-30, 30)),
        "hemisphere": LabelParams(n_classes=3, label_names=["left", "right", "both"]),
    })
    opt: OptConfig = field(default_factory=OptConfig)
    seed: int = 3


def model_label_to_value(label: Any, label_params: LabelParams):
    if label_params.label_names is not None:
        return label
    elif label_params.limits is not None:
        return (label / label_params.n_classes) * (
            label_params.limits[1] - label_params.limits[0]
        ) + label_params.limits[0]
    else:
        raise ValueError("Label parameters must have either limits or label_names")


class ApproxAccuracy(Metric):
    def __init__(self, tolerance: float = 10.0):
        super().__init__()

        self.tolerance = tolerance
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor):
        assert preds.shape == target.shape

        self.correct += torch.sum(torch.abs(preds - target) <= self.tolerance)
        self.total += target.numel()

    def compute(self):
        return self.correct.float() / self.total


class MetricDictInputWrapper(Metric):
    def __init__(self, metric: Metric, key: str) -> None:
        super().__init__()
        if not isinstance(metric, Metric):
            raise TypeError(
                "metric arg need to be an instance of a torchmetrics metric"
                f" but got {metric}"
            )
        self._base_metric = metric
        self.key = key

    def update(self, *args: Dict, **kwargs: Dict) -> None:
        new_args = [a[self.key] for a in args]
        new_kwargs = {k: v[self.key] for k, v in kwargs.items()}
        self._base_metric(*new_args, **new_kwargs)

    def compute(self) -> Dict[str, Tensor]:
        return self._base_metric.compute()

    def reset(self) -> None:
        self._base_metric.reset()

    def persistent(self, mode: bool = True) -> None:
        self._base_metric.persistent(mode)


class MilestonesFinetuning(BaseFinetuning):
    def __init__(self, milestones: tuple, train_bn: bool):
        super().__init__()
        self.milestones = milestones
        self.train_bn = train_bn

    def freeze_before_training(self, pl_module: pl.LightningModule):
        for param in pl_module.feature_extractor.parameters():
            param.requires_grad = False

    def finetune_function(
        self, pl_module: pl.LightningModule, epoch: int, optimizer: Optimizer
    ):
        if epoch == self.milestones[0]:
            # unfreeze 5 last layers
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor[-5:],
                optimizer=optimizer,
                train_bn=self.train_bn,
                initial_denom_lr=10.0,
            )

        elif epoch == self.milestones[1]:
            # unfreeze remaing layers
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor[:-5],
                optimizer=optimizer,
                train_bn=self.train_bn,
                initial_denom_lr=10.0,
            )


class BrainwaysRegModel(pl.LightningModule):
    def __init__(self, config: BrainwaysConfig) -> None:
        super().__init__()
        self.config = config
        self.save_hyperparameters()

        self.label_params = self.config.label_params

        self._build_model()
        self._build_metrics()

    def _build_metrics_base(self, postfix=""):
        return {
            "ap_acc_10"
            + postfix: MetricDictInputWrapper(
                ApproxAccuracy(tolerance=10), "ap" + postfix
            ),
            "ap_acc_20"
            + postfix: MetricDictInputWrapper(
                ApproxAccuracy(tolerance=20), "ap" + postfix
            ),
            "ap_mae"
            + postfix: MetricDictInputWrapper(MeanAbsoluteError(), "ap" + postfix),
            "hem_acc"
            + postfix: MetricDictInputWrapper(
                Accuracy(
                    num_classes=self.label_params["hemisphere"].n_classes,
                    task="multiclass",
                ),
                "hemisphere" + postfix,
            ),
            "rot_frontal_acc"
            + postfix: MetricDictInputWrapper(
                ApproxAccuracy(tolerance=5),
                "rot_frontal" + postfix,
            ),
        }

    def _build_metrics(self):
        metrics = self._build_metrics_base()
        metrics = MetricCollection(metrics)

        self.train_metrics = metrics.clone(prefix="train_")
        self.val_metrics = metrics.clone(prefix="val_")
        self.test_metrics = metrics.clone(prefix="test_")

    def _build_model(self):
        """Define model layers & loss."""
        _layers = [
            nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(),
            nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        ]
        self.feature_extractor = nn.Sequential(*_layers)

        # 2. Classifier:
        num_outputs = sum(
            self.label_params[output].n_classes for output in self.config.outputs
        )
        # Confidence output
        num_outputs += 2

        _fc_layers = [
            nn.Linear(4, 8),
            nn.ReLU(),
            nn.Linear(8, num_outputs),
        ]
        self.fc = nn.Sequential(*_fc_layers)

        # 3. Loss:
        self.loss_func = F.nll_loss

    def forward(self, x):
        """Forward pass. Returns logits."""
        x = self.feature_extractor(x)
        x = x.squeeze(-1).squeeze(-1)
        x = self.fc(x)

        outputs = {}
        out_i = 0
        for output_name in self.config.outputs:
            outputs[output_name] = x[
                :, out_i : self.label_params[output_name].n_classes
            ]
        confidence = x[:, -2:]
        return outputs, confidence

    def step(self, batch, batch_idx, phase: str, metrics: MetricCollection):
        batch_size, C, H, W = batch["image"].shape
        # Forward pass
        with torch.no_grad():
            if phase == "train":
                image = self.augmentation(batch["image"])
            else:
                image = self.transform(batch["image"])
        y_logits, confidence_logits = self(image)

        # mask out irrelevant outputs
        for output_name in self.config.outputs:
            output_mask = batch[output_name + "_mask"]
            batch[output_name] = batch[output_name][output_mask]
            y_logits[output_name] = y_logits[output_name][output_mask]

        # Compute losses and metrics
        losses = {}
        pred_values = {}
        gt_values = {}
        for output_name in self.config.outputs:
            if len(y_logits[output_name]) == 0:
                continue
            losses[output_name] = (
                self.loss_func(
                    input=F.log_softmax(y_logits[output_name], dim=-1),
                    target=batch[output_name],
                )
                * self.config.opt.loss_weights[output_name]
            )
            pred_values[output_name] = model_label_to_value(
                label=torch.argmax(y_logits[output_name], dim=-1),
                label_params=self.label_params[output_name],
            )
            gt_values[output_name] = model_label_to_value(
                label=batch[output_name],
                label_params=self.label_params[output_name],
            )

        metrics_ = metrics(pred_values, gt_values)
        self.log_dict(metrics_, prog_bar=True, batch_size=batch_size)

        loss = torch.mean(torch.stack(list(losses.values())))

        if phase != "train":
            self.log(f"{phase}_loss", loss, prog_bar=True, batch_size=batch_size)

        return loss

    def training_step(self, batch, batch_idx):
        return self.step(batch, batch_idx, "train", self.train_metrics)

    def validation_step(self, batch, batch_idx):
        self.step(batch, batch_idx, "val", self.val_metrics)

    def test_step(self, batch, batch_idx):
        self.step(batch, batch_idx, "test", self.test_metrics)

    def configure_optimizers(self):
        parameters = list(self.parameters())
        trainable_parameters = list(filter(lambda p: p.requires_grad, parameters))
        rank_zero_info(
            f"The model will start training with only {len(trainable_parameters)} "
            f"trainable parameters out of {len(parameters)}."
        )
        optimizer = optim.Adam(
            trainable_parameters,
            lr=self.config.opt.lr,
            weight_decay=self.config.opt.weight_decay,
        )
        return optimizer

    @cached_property
    def transform(self):
        return nn.Identity()

    @cached_property
    def augmentation(self):
        return lambda image: image + 0.05 * torch.randn_like(image)


class Slices(Dataset):
    def __init__(self, size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.image = torch.rand(size, 1, 8, 8, generator=generator)
        self.ap = torch.randint(0, 6, (size,), generator=generator)
        self.rot_frontal = torch.randint(0, 4, (size,), generator=generator)
        self.hemisphere = torch.randint(0, 3, (size,), generator=generator)
        self.hemisphere_mask = torch.rand(size, generator=generator) > 0.3

    def __len__(self):
        return len(self.ap)

    def __getitem__(self, i):
        return {"image": self.image[i], "ap": self.ap[i], "ap_mask": True,
                "rot_frontal": self.rot_frontal[i], "rot_frontal_mask": True,
                "hemisphere": self.hemisphere[i], "hemisphere_mask": bool(self.hemisphere_mask[i]) or i % 4 == 0}


class BrainwaysDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 4):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str):
        self.train = Slices(24, 0)
        self.val = Slices(8, 1)

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)


def main(root_dir: str | Path, precision: str = "32-true", check_val_every_n_epoch: int = 1,
         stop_after: int | None = None) -> dict[str, Any]:
    """`stop_after=n`: the run is cut after epoch n (a checkpoint saved with
    `trainer.save_checkpoint`) and a fresh model, callbacks and Trainer resume it with
    `fit(ckpt_path=...)` (a driver of our own: the repository's starts from weights only)."""
    config = BrainwaysConfig()
    config.opt.check_val_every_n_epoch = check_val_every_n_epoch
    pl.seed_everything(config.seed, workers=True)
    root_dir = Path(root_dir)
    ckpt_path = None
    for max_epochs in ([stop_after] if stop_after else []) + [config.opt.max_epochs]:
        model = BrainwaysRegModel(config)
        datamodule = BrainwaysDataModule()
        finetuning_callback = MilestonesFinetuning(
            milestones=config.opt.milestones, train_bn=config.opt.train_bn
        )
        checkpoint_callback = ModelCheckpoint(monitor="val_loss", mode="min")
        trainer = pl.Trainer(
            default_root_dir=str(root_dir),
            callbacks=[finetuning_callback, checkpoint_callback],
            accelerator="cpu",
            precision=precision,
            max_epochs=max_epochs,
            check_val_every_n_epoch=config.opt.check_val_every_n_epoch,
            logger=False, enable_progress_bar=False, enable_model_summary=False,
        )
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=False)  # the config object
        ckpt_path = str(root_dir / "cut.ckpt")
        trainer.save_checkpoint(ckpt_path)
    fit_metrics = dict(trainer.callback_metrics)
    optimizer = trainer.optimizers[0]
    groups = [(len(group["params"]), group["lr"], group["weight_decay"]) for group in optimizer.param_groups]
    frozen = {name: parameter.requires_grad for name, parameter in model.named_parameters()}
    bn_tracking = [module.track_running_stats for module in model.feature_extractor if isinstance(module, nn.BatchNorm2d)]
    best = Path(checkpoint_callback.best_model_path).name
    test = trainer.test(model, datamodule=datamodule, verbose=False)
    return {"model": model, "trainer": trainer, "val": fit_metrics, "test": test, "groups": groups,
            "frozen": frozen, "bn_tracking": bn_tracking, "best": best,
            "best_score": float(checkpoint_callback.best_model_score),
            "files": sorted(path.name for path in Path(root_dir).rglob("*.ckpt") if path.name != "cut.ckpt")}
