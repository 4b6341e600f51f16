"""An encoder-decoder LSTM forecaster, from jsaghi/MFTSDecoder (`source/lstm.py`: `LSTM_Predict`,
`LightningLSTM`; `source/train_lstm.py`).

Kept as written: `LSTM_Predict`, whose decoder feeds each predicted step back as the next input
(an autoregressive loop of `output_size` steps after an encoder LSTM); `LightningLSTM` with
`save_hyperparameters()` over the wrapped `nn.Module` (both frameworks warn), MSE loss logged as
`train_loss`/`val_loss` with `sync_dist=True`, Adam; `load_with_model`, which rebuilds the wrapper
and reads `torch.load(checkpoint_path)['state_dict']`; the training script's
`EarlyStopping(monitor='val_loss', min_delta=1e-5, mode='min', patience=..., verbose=True)` imported
from Lightning's `callbacks.early_stopping` module, `CSVLogger(save_dir=...)`,
`ModelCheckpoint(monitor='val_loss', dirpath=..., filename='lstm_imputed' + '-{epoch}',
save_top_k=5, mode='min', verbose=True)` and `fit(model, train, val)` with two loaders.
Substituted: the imputed weather series is a noisy sum of sines cut into windows of 12 steps
(3 features) predicting the next 4 values; `settings.py`'s sizes are shrunk (hidden 8, two
layers, dropout 0.1); at most 14 epochs with patience 1 (100 and 5 in the repo: here the stop comes
at epoch 9); `torch.load` is given
`weights_only=False`: the checkpoint holds the wrapped module among the hyperparameters.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from trainer.callbacks import ModelCheckpoint
from trainer.callbacks.early_stopping import EarlyStopping
from trainer.loggers import CSVLogger

LSTM_HIDDEN_SIZE, LSTM_INPUT_SIZE, NUM_LSTM_LAYERS, LSTM_DROPOUT, LSTM_LR, DELAY = 8, 3, 2, 0.1, 1e-2, 4


class LSTM_Predict(nn.Module):
    def __init__(self, output_size):
        super().__init__()
        self.hidden_size = LSTM_HIDDEN_SIZE
        self.output_size = output_size
        self.encoder = nn.LSTM(LSTM_INPUT_SIZE, self.hidden_size, num_layers=NUM_LSTM_LAYERS, batch_first=True,
                               dropout=LSTM_DROPOUT)
        self.decoder = nn.LSTM(1, self.hidden_size, num_layers=NUM_LSTM_LAYERS, batch_first=True, dropout=LSTM_DROPOUT)
        self.projection = nn.Linear(self.hidden_size, 1)

    def forward(self, inputs):
        batch_size = inputs.size(0)
        _, (hidden, cell) = self.encoder(inputs)
        decoder_input = torch.zeros(batch_size, 1, 1, device=inputs.device)
        outputs = []
        for _ in range(self.output_size):
            out, (hidden, cell) = self.decoder(decoder_input, (hidden, cell))
            step_output = self.projection(out)
            outputs.append(step_output)
            decoder_input = step_output
        return torch.cat(outputs, dim=1)


class LightningLSTM(L.LightningModule):
    def __init__(self, model):
        super().__init__()
        self.save_hyperparameters()
        self.model = model
        self.loss = nn.MSELoss()

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = self.loss(y_hat, y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = self.loss(y_hat, y)
        self.log("val_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=LSTM_LR)

    @classmethod
    def load_with_model(cls, checkpoint_path, model_class):
        model = model_class(DELAY)
        wrapper = cls(model)
        checkpoint = torch.load(checkpoint_path, weights_only=False)
        wrapper.load_state_dict(checkpoint['state_dict'])
        return wrapper


def windows(count: int, generator: torch.Generator) -> TensorDataset:
    t = torch.arange(count + 16, dtype=torch.float32)
    series = torch.stack([torch.sin(t / 3), torch.cos(t / 5), torch.sin(t / 7 + 1)], dim=-1)
    series = series + 0.05 * torch.randn(series.shape, generator=generator)
    x = torch.stack([series[i:i + 12] for i in range(count)])
    y = torch.stack([series[i + 12:i + 12 + DELAY, :1] for i in range(count)])
    return TensorDataset(x, y)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 14, patience: int = 1) -> dict[str, Any]:
    L.seed_everything(17)
    g = torch.Generator().manual_seed(4)
    train = DataLoader(windows(48, g), batch_size=8, shuffle=True)
    val = DataLoader(windows(16, g), batch_size=8)
    model_path = str(Path(root_dir) / "models")
    base_lstm = LSTM_Predict(DELAY)
    lit_lstm = LightningLSTM(base_lstm)
    early_stopping = EarlyStopping(monitor='val_loss', min_delta=1e-5, mode='min', patience=patience, verbose=True)
    logger = CSVLogger(save_dir=str(Path(root_dir) / "history" / "lstm_imputed"))
    checkpoint = ModelCheckpoint(monitor='val_loss', dirpath=model_path, filename='lstm_imputed' + '-{epoch}',
                                 save_top_k=5, mode='min', verbose=True)
    trainer = L.Trainer(max_epochs=max_epochs, logger=logger, callbacks=[checkpoint, early_stopping], precision=precision,
                        accelerator="cpu", enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=2)
    trainer.fit(lit_lstm, train, val)
    reloaded = LightningLSTM.load_with_model(checkpoint.best_model_path, LSTM_Predict)
    return {"model": lit_lstm, "trainer": trainer, "val": dict(trainer.callback_metrics),
            "files": sorted(p.name for p in Path(model_path).iterdir()), "best": Path(checkpoint.best_model_path).name,
            "best_score": float(checkpoint.best_model_score), "top": sorted(Path(p).name for p in checkpoint.best_k_models),
            "stopped_epoch": early_stopping.stopped_epoch, "wait": early_stopping.wait_count,
            "reloaded": reloaded.state_dict(), "metrics_csv": Path(logger.log_dir) / "metrics.csv"}
