"""Kraken's training harness (github.com/mittagessen/kraken, `kraken/lib/train/trainer.py` and
the `optimizer_step`/`lr_scheduler_step`/`_configure_optimizer_and_lr_scheduler` of
`kraken/lib/train/recognition.py`), written against Lightning 2 (`import ... as L`).

Kept as written: `KrakenTrainer(L.Trainer)` filling the Trainer's kwargs (a
`L.pytorch.loggers.TensorBoardLogger(log_dir)` made through the `L.pytorch` attribute path
after an `isinstance(..., L.pytorch.loggers.logger.Logger)` check, a step-wise
`LearningRateMonitor`, `self.automatic_optimization = False` set on the trainer);
`KrakenFreezeBackbone(BaseFinetuning)` freezing `net[:-1]` in `on_train_start` and unfreezing
at a `global_step` from `on_train_batch_start`, recording the groups with BaseFinetuning's
`self._store(...)`; `KrakenSetOneChannelMode` reading `trainer.model.nn` and
`trainer.datamodule.train_set`; `KrakenSaveModel` saving `{output}_{current_epoch}.mlmodel`
from `on_validation_end` with `trainer.logged_metrics`; the linear warmup in `optimizer_step`;
`lr_scheduler_step` stepping schedulers on `trainer.is_last_batch`; and the scheduler dict
(`'interval': 'step'`, with `monitor`, `strict: False` and `reduce_on_plateau: True` for the
plateau), its optimizer built on `self.net.parameters()` (frozen ones included), with
`len(self.trainer.datamodule.train_set)` read in `configure_optimizers`.
Substituted: the VGSL network is a small MLP classifier with a stand-in `nn` object holding
kraken's metadata; the progress bar and RichModelSummary are off (no `rich` here); synthetic
data in a DataModule.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import BaseFinetuning, Callback, LearningRateMonitor

logger = logging.getLogger(__name__)


class KrakenTrainer(L.Trainer):
    def __init__(self,
                 enable_progress_bar: bool = True,
                 enable_summary: bool = True,
                 min_epochs: int = 5,
                 max_epochs: int = 100,
                 freeze_backbone=-1,
                 pl_logger: Union[Any, str, None] = None,
                 log_dir: Optional[Any] = None,
                 *args,
                 **kwargs):
        kwargs['enable_checkpointing'] = False
        kwargs['enable_progress_bar'] = enable_progress_bar
        kwargs['min_epochs'] = min_epochs
        kwargs['max_epochs'] = max_epochs
        kwargs['callbacks'] = ([] if 'callbacks' not in kwargs else kwargs['callbacks'])
        if not isinstance(kwargs['callbacks'], list):
            kwargs['callbacks'] = [kwargs['callbacks']]

        if pl_logger:
            if 'logger' in kwargs and isinstance(kwargs['logger'], L.pytorch.loggers.logger.Logger):
                logger.debug('Experiment logger has been provided outside KrakenTrainer as `logger`')
            elif isinstance(pl_logger, L.pytorch.loggers.logger.Logger):
                logger.debug('Experiment logger has been provided outside KrakenTrainer as `pl_logger`')
                kwargs['logger'] = pl_logger
            elif pl_logger == 'tensorboard':
                logger.debug('Creating default experiment logger')
                kwargs['logger'] = L.pytorch.loggers.TensorBoardLogger(log_dir)
            else:
                logger.error('`pl_logger` was set, but %s is not an accepted value', pl_logger)
                raise ValueError(f'{pl_logger} is not acceptable as logger')
            kwargs['callbacks'].append(LearningRateMonitor(logging_interval='step'))
        else:
            kwargs['logger'] = False

        kwargs['enable_model_summary'] = False
        if freeze_backbone > 0:
            kwargs['callbacks'].append(KrakenFreezeBackbone(freeze_backbone))

        kwargs['callbacks'].extend([KrakenSetOneChannelMode(), KrakenSaveModel()])
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False

    def fit(self, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings(action='ignore', category=UserWarning,
                                    message='The dataloader,')
            super().fit(*args, **kwargs)


class KrakenFreezeBackbone(BaseFinetuning):
    """
    Callback freezing all but the last layer for fixed number of iterations.
    """
    def __init__(self, unfreeze_at_iterations=10):
        super().__init__()
        self.unfreeze_at_iteration = unfreeze_at_iterations

    def freeze_before_training(self, pl_module):
        pass

    def finetune_function(self, pl_module, current_epoch, optimizer):
        pass

    def on_train_start(self, trainer, pl_module) -> None:
        self.freeze(pl_module.net[:-1])

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.unfreeze_at_iteration:
            for opt_idx, optimizer in enumerate(trainer.optimizers):
                num_param_groups = len(optimizer.param_groups)
                self.unfreeze_and_add_param_group(modules=pl_module.net[:-1],
                                                  optimizer=optimizer,
                                                  train_bn=True,)
                current_param_groups = optimizer.param_groups
                self._store(pl_module, opt_idx, num_param_groups, current_param_groups)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        """Called when the epoch begins."""
        pass


class KrakenSetOneChannelMode(Callback):
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and trainer.current_epoch == 0 and trainer.model.nn.model_type == 'recognition':
            ds = getattr(pl_module, 'train_set', None)
            if not ds and trainer.datamodule:
                ds = trainer.datamodule.train_set
            im_mode = ds.dataset.im_mode
            if im_mode in ['1', 'L']:
                logger.info(f'Setting model one_channel_mode to {im_mode}.')
                trainer.model.nn.one_channel_mode = im_mode


class KrakenSaveModel(Callback):
    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            trainer.model.nn.hyper_params['completed_epochs'] += 1
            metric = float(trainer.logged_metrics['val_metric']) if 'val_metric' in trainer.logged_metrics else -1.0
            trainer.model.nn.user_metadata['accuracy'].append((trainer.global_step, metric))
            trainer.model.nn.user_metadata['metrics'].append((trainer.global_step, {k: float(v) for k, v in trainer.logged_metrics.items()}))
            trainer.model.nn.save_model(f'{trainer.model.output}_{trainer.current_epoch}.mlmodel')
            trainer.model.best_model = f'{trainer.model.output}_{trainer.model.best_epoch}.mlmodel'


class VGSLStandIn:
    """What the callbacks read of kraken's `TorchVGSLModel`."""

    def __init__(self, net: torch.nn.Module) -> None:
        self.net, self.model_type, self.one_channel_mode = net, 'recognition', None
        self.hyper_params: dict[str, Any] = {'completed_epochs': 0}
        self.user_metadata: dict[str, list[Any]] = {'accuracy': [], 'metrics': []}
        self.saved: list[str] = []

    def save_model(self, path: str) -> None:
        torch.save(self.net.state_dict(), path)
        self.saved.append(Path(path).name)


class LineDataset(TensorDataset):
    im_mode = 'L'


class LineDataModule(L.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(8)
        x = torch.randn(120, 12, generator=g)
        y = (x[:, :4].sum(-1) > 0).long() + (x[:, 4:8].sum(-1) > 1).long()
        data = LineDataset(x, y)
        self.train_set = torch.utils.data.Subset(data, range(90))
        self.val_set = torch.utils.data.Subset(data, range(90, 120))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=10, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=15)


class RecognitionModel(L.LightningModule):
    def __init__(self, hyper_params: dict[str, Any], output: str) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.BatchNorm1d(24), torch.nn.ReLU(),
                                       torch.nn.Linear(24, 24), torch.nn.ReLU(), torch.nn.Linear(24, 3))
        self.nn = VGSLStandIn(self.net)
        self.output = output
        self.best_epoch = 0
        self.best_model = None
        self.len_train_set = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log('train_loss', loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        accuracy = (logits.argmax(-1) == y).float().mean()
        self.log('val_accuracy', accuracy, on_step=False, on_epoch=True, prog_bar=True, logger=True)
        self.log('val_metric', accuracy, on_step=False, on_epoch=True, prog_bar=False, logger=True)

    def configure_optimizers(self):
        self.len_train_set = len(self.trainer.datamodule.train_set)
        return _configure_optimizer_and_lr_scheduler(self.hparams.hyper_params,
                                                     self.net.parameters(),
                                                     loss_tracking_mode='max')

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        # update params
        optimizer.step(closure=optimizer_closure)

        # linear warmup between 0 and the initial learning rate `lrate` in `warmup` steps.
        if self.hparams.hyper_params['warmup'] and self.trainer.global_step < self.hparams.hyper_params['warmup']:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / self.hparams.hyper_params['warmup'])
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.hparams.hyper_params['lrate']

    def lr_scheduler_step(self, scheduler, metric):
        if not self.hparams.hyper_params['warmup'] or self.trainer.global_step >= self.hparams.hyper_params['warmup']:
            # step OneCycleLR each batch if not in warmup phase
            if isinstance(scheduler, lr_scheduler.OneCycleLR):
                scheduler.step()
            # step every other scheduler epoch-wise
            elif self.trainer.is_last_batch:
                if metric is None:
                    scheduler.step()
                else:
                    scheduler.step(metric)


def _configure_optimizer_and_lr_scheduler(hparams, params, loss_tracking_mode='min'):
    optimizer = hparams.get("optimizer")
    lr = hparams.get("lrate")
    momentum = hparams.get("momentum")
    weight_decay = hparams.get("weight_decay")
    schedule = hparams.get("schedule")
    gamma = hparams.get("gamma")
    step_size = hparams.get("step_size")
    rop_factor = hparams.get("rop_factor")
    rop_patience = hparams.get("rop_patience")
    completed_epochs = hparams.get("completed_epochs")

    if optimizer in ['Adam', 'AdamW']:
        optim = getattr(torch.optim, optimizer)(params, lr=lr, weight_decay=weight_decay)
    else:
        optim = getattr(torch.optim, optimizer)(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    lr_sched = {}
    if schedule == 'exponential':
        lr_sched = {'scheduler': lr_scheduler.ExponentialLR(optim, gamma, last_epoch=completed_epochs - 1),
                    'interval': 'step'}
    elif schedule == 'step':
        lr_sched = {'scheduler': lr_scheduler.StepLR(optim, step_size, gamma, last_epoch=completed_epochs - 1),
                    'interval': 'step'}
    elif schedule == 'reduceonplateau':
        lr_sched = {'scheduler': lr_scheduler.ReduceLROnPlateau(optim, mode=loss_tracking_mode, factor=rop_factor,
                                                                patience=rop_patience),
                    'interval': 'step'}
    elif schedule != 'constant':
        raise ValueError(f'Unsupported learning rate scheduler {schedule}.')

    ret = {'optimizer': optim}
    if lr_sched:
        ret['lr_scheduler'] = lr_sched

    if schedule == 'reduceonplateau':
        lr_sched['monitor'] = 'val_accuracy'
        lr_sched['strict'] = False
        lr_sched['reduce_on_plateau'] = True

    return ret


def main(root_dir: str | Path, precision: str = "32-true", schedule: str = "reduceonplateau", max_epochs: int = 4,
         freeze_backbone: int = 12) -> dict[str, Any]:
    L.seed_everything(5)
    root = Path(root_dir)
    root.mkdir(parents=True, exist_ok=True)
    hyper_params = {'optimizer': 'SGD', 'lrate': 0.1, 'momentum': 0.9, 'weight_decay': 1e-4, 'schedule': schedule,
                    'gamma': 0.8, 'step_size': 2, 'rop_factor': 0.5, 'rop_patience': 0, 'completed_epochs': 0, 'warmup': 5}
    model = RecognitionModel(hyper_params, output=str(root / 'model'))
    trainer = KrakenTrainer(enable_progress_bar=False, enable_summary=False, min_epochs=2, max_epochs=max_epochs,
                            freeze_backbone=freeze_backbone, pl_logger='tensorboard', log_dir=str(root / 'tb'),
                            precision=precision, accelerator='cpu', log_every_n_steps=3)
    trainer.fit(model, datamodule=LineDataModule())
    lr_monitor = next(c for c in trainer.callbacks if isinstance(c, LearningRateMonitor))
    finetune = next(c for c in trainer.callbacks if isinstance(c, BaseFinetuning))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "saved": model.nn.saved,
            "metadata": model.nn.user_metadata, "one_channel_mode": model.nn.one_channel_mode,
            "lrs": lr_monitor.lrs, "groups": finetune._internal_optimizer_metadata,
            "param_groups": [len(g["params"]) for g in trainer.optimizers[0].param_groups]}
