"""An autoregressive sequence model trained by hand with two optimizers, from a public research
repository on spiking networks (found by code search, file id 20182596101: a LightningModule
with `automatic_optimization=False`, `opt_1, opt_2 = self.optimizers()`).

Kept as written: the optimizer chosen by `trainer.current_epoch < num_fast_epoch`,
`configure_optimizers` returning a tuple of two dicts (the second with an `lr_scheduler` dict
holding a `ReduceLROnPlateau` and its `monitor`), `self.log_dict(grad_norm(self, norm_type=2),
on_epoch=True)` after `manual_backward`, `self.clip_gradients(opt, gradient_clip_val=...,
gradient_clip_algorithm="norm")`, the plateau stepped by hand on `trainer.is_last_batch` with
`trainer.callback_metrics[tracking_metric]`, a torchmetrics `MetricCollection` cloned per stage
and logged with `log_dict(metrics, on_step=prefix == "train_", on_epoch=True)`,
`on_train_batch_end` applying parameter constraints, a `@torch.no_grad()` forward in
`validation_step` with a `torch.randint` pick of the example to inspect, and `test_step`.
Substituted: the spiking encoder/decoder is a small GRU with a spike-probability proxy
(sigmoid of its states) and `snn_regularization` a hinge on those probabilities; the layer
statistics the validation writes to the logger are left out; the spectral loss is an MSE on
the frame's FFT magnitudes; data are synthetic sine waves; sizes shrunk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import trainer as pl
from trainer.loggers import CSVLogger
from trainer.utilities import grad_norm


class SpectralLoss(torch.nn.Module):
    def spectral_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(torch.fft.rfft(outputs, dim=-1).abs(), torch.fft.rfft(targets, dim=-1).abs())

    def forward(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(outputs, targets) + 0.1 * self.spectral_loss(outputs, targets)


def snn_regularization(probs: list[torch.Tensor], bound: float, coeff: torch.Tensor, kind: str, reduce_layer: str = "sum",
                       reduce_neuron: str = "mean") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    gaps = [(p - bound).clamp(min=0) if kind == "upper" else (bound - p).clamp(min=0) for p in probs]
    per_layer = torch.stack([g.sum() if reduce_neuron == "sum" else g.mean() for g in gaps]) * coeff
    return per_layer.sum(), {f"reg_{kind}_{i}": value.detach() for i, value in enumerate(per_layer)}


class Encoder(torch.nn.Module):
    def __init__(self, n_in: int, n_hidden: int) -> None:
        super().__init__()
        self.l1 = torch.nn.GRU(n_in, n_hidden, batch_first=True)
        self.l2 = torch.nn.GRU(n_hidden, n_hidden, batch_first=True)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h1, _ = self.l1(x)
        h2, _ = self.l2(h1)
        self.l1_spike, self.l2_spike = torch.sigmoid(h1), torch.sigmoid(h2)
        return [h1, h2]


class Model(torch.nn.Module):
    def __init__(self, n_in: int, n_hidden: int) -> None:
        super().__init__()
        self.encoder = Encoder(n_in, n_hidden)
        self.out_layer = torch.nn.Linear(n_hidden, n_in)

    def forward_with_states(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        states = self.encoder(x)
        return [s.transpose(0, 1) for s in states], self.out_layer(states[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with_states(x)[1]

    def apply_parameter_constraints(self) -> None:
        with torch.no_grad():
            self.out_layer.weight.clamp_(-1.0, 1.0)


class SpikingAR(pl.LightningModule):
    def __init__(self, n_in: int = 4, n_hidden: int = 8, lr: float = 5e-3, fast_epoch_lr_factor: float = 4.0,
                 num_fast_epoch: int = 1, patience: int = 0, factor: float = 0.5, grad_norm: float = 0.5,
                 tracking_metric: str = "val_loss", tracking_mode: str = "min") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Model(n_in, n_hidden)
        self.loss = SpectralLoss()
        self.lr, self.fast_epoch_lr_factor, self.num_fast_epoch = lr, fast_epoch_lr_factor, num_fast_epoch
        self.patience, self.factor, self.grad_norm = patience, factor, grad_norm
        self.tracking_metric, self.tracking_mode = tracking_metric, tracking_mode
        self.prediction_delay, self.skip_first_n = 0, 2
        self.min_spike_prob, self.max_spike_prob = 0.1, 0.6
        self.min_layer_coeff, self.max_layer_coeff = [0.1, 0.1], [0.2, 0.2]
        self.picked: list[int] = []
        self.init_metrics_and_loss()
        self.automatic_optimization = False

    def forward(self, inputs: torch.Tensor):
        out = self.model(inputs)
        return out

    @torch.no_grad()
    def forward_with_states(self, inputs: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        states, out = self.model.forward_with_states(inputs)
        states = [s[:, :, self.prediction_delay:] for s in states]
        return states, out

    def on_train_batch_end(self, outputs, batch, batch_idx: int):
        self.model.apply_parameter_constraints()

    def process_predictions_and_compute_losses(self, outputs, targets, block_idx):
        targets = targets[:, 1 + self.skip_first_n:]
        loss = self.loss(outputs[:, self.skip_first_n + self.prediction_delay:], targets)
        block_idx = block_idx[:, self.prediction_delay:].unsqueeze(-1)
        outputs_reduce = outputs
        return (outputs_reduce, loss, block_idx)

    def update_and_log_metrics(self, outputs, targets, loss, metrics, prefix):
        targets = targets[:, 1:]
        outputs = outputs[:, self.prediction_delay:]
        outputs = outputs.reshape(-1, outputs.shape[-1])
        targets = targets.reshape(-1, targets.shape[-1])

        metrics(outputs, targets)
        self.log_dict(metrics, prog_bar=True, on_epoch=True, on_step=True if prefix == "train_" else False)
        self.log(f"{prefix}loss", loss, prog_bar=True, on_epoch=True, on_step=True if prefix == "train_" else False)
        self.log(f"{prefix}spectral_loss", self.loss.spectral_loss(outputs, targets), prog_bar=True, on_epoch=True,
                 on_step=True if prefix == "train_" else False)

    def training_step(self, batch, batch_idx):
        opt_1, opt_2 = self.optimizers()
        if self.trainer.current_epoch < self.num_fast_epoch:
            opt = opt_1
        else:
            opt = opt_2

        inputs, targets, block_idx = batch
        outputs = self(inputs)
        outputs_reduce, loss, block_idx = self.process_predictions_and_compute_losses(outputs, targets, block_idx)
        self.update_and_log_metrics(outputs_reduce, targets, loss, self.train_metric, prefix="train_")

        sum_spikes = [self.model.encoder.l1_spike, self.model.encoder.l2_spike]
        sum_spikes = [x[:, self.skip_first_n:].mean(0).mean(0) for x in sum_spikes]
        reg_upper, log_upper = snn_regularization(sum_spikes, self.max_spike_prob, torch.tensor(self.max_layer_coeff, device=inputs.device), 'upper', reduce_layer='sum', reduce_neuron="sum")
        reg_lower, log_lower = snn_regularization(sum_spikes, self.min_spike_prob, torch.tensor(self.min_layer_coeff, device=inputs.device), 'lower', reduce_layer='sum')
        log_upper.update(log_lower)
        reg_loss = reg_upper + reg_lower

        self.log_dict(log_upper, prog_bar=True, on_epoch=True)
        opt.zero_grad()

        loss = loss + reg_loss
        self.manual_backward(loss)
        self.log_dict(grad_norm(self, norm_type=2), on_epoch=True)
        self.clip_gradients(opt, gradient_clip_val=self.grad_norm, gradient_clip_algorithm="norm")
        opt.step()
        if self.trainer.is_last_batch and self.trainer.current_epoch > self.num_fast_epoch:
            sch = self.lr_schedulers()
            sch.step(self.trainer.callback_metrics[self.tracking_metric])

        return loss

    def validation_step(self, batch, batch_idx):
        inputs, targets, block_idx = batch
        states, outputs = self.forward_with_states(inputs)
        outputs_reduce, loss, block_idx = self.process_predictions_and_compute_losses(outputs, targets, block_idx)
        self.update_and_log_metrics(outputs_reduce, targets, loss, self.val_metric, prefix="val_")
        if batch_idx == 0:
            rnd_batch_idx = torch.randint(0, inputs.shape[0], size=()).item()
            self.picked.append(rnd_batch_idx)
        return loss

    def test_step(self, batch, batch_idx):
        inputs, targets, block_idx = batch
        outputs = self.forward(inputs)
        outputs_reduce, loss, block_idx = self.process_predictions_and_compute_losses(outputs, targets, block_idx)
        self.update_and_log_metrics(outputs_reduce, targets, loss, self.test_metric, prefix="test_")
        return loss

    def init_metrics_and_loss(self):
        metrics = torchmetrics.MetricCollection({"mse": torchmetrics.MeanSquaredError()})
        self.train_metric = metrics.clone(prefix="train_")
        self.val_metric = metrics.clone(prefix="val_")
        self.test_metric = metrics.clone(prefix="test_")

    def configure_optimizers(self):
        opt_1 = torch.optim.Adam(params=self.parameters(), lr=self.lr * self.fast_epoch_lr_factor)
        opt_2 = torch.optim.Adam(params=self.parameters(), lr=self.lr)
        lr_2 = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer=opt_2, mode=self.tracking_mode, factor=self.factor,
                                                          patience=self.patience)
        return (
            {"optimizer": opt_1},
            {"optimizer": opt_2, "lr_scheduler": {"scheduler": lr_2, "monitor": self.tracking_metric}},
        )


def waves(n: int, steps: int, channels: int, generator: torch.Generator) -> torch.Tensor:
    t = torch.arange(steps + 1, dtype=torch.float32) / 4
    phase = torch.rand(n, 1, channels, generator=generator) * 6.28
    freq = 0.5 + torch.rand(n, 1, channels, generator=generator)
    return torch.sin(t[None, :, None] * freq + phase) + 0.05 * torch.randn(n, steps + 1, channels, generator=generator)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4) -> dict[str, Any]:
    pl.seed_everything(21)
    g = torch.Generator().manual_seed(4)
    seq = waves(40, 10, 4, g)
    inputs, targets = seq[:, :-1], seq
    block_idx = torch.arange(10).repeat(40, 1)
    data = TensorDataset(inputs, targets, block_idx)
    train, val = torch.utils.data.Subset(data, range(32)), torch.utils.data.Subset(data, range(32, 40))
    model = SpikingAR()
    trainer = pl.Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=root_dir,
                         logger=CSVLogger(root_dir, name="csv"), log_every_n_steps=3, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(train, batch_size=8, shuffle=True), DataLoader(val, batch_size=8))
    fit_metrics = dict(trainer.callback_metrics)
    test = trainer.test(model, DataLoader(val, batch_size=8), verbose=False)
    return {"model": model, "trainer": trainer, "val": fit_metrics, "test": test[0],
            "picked": model.picked, "lrs": [o.param_groups[0]["lr"] for o in trainer.optimizers]}
