"""A survival model trained with a pairwise ranking loss and averaged by SWA, from the Kaggle
notebook "Refactoring NN Pairwise Ranking Loss" (albansteff/refactoring-nn-pairwise-ranking-loss,
equity-post-HCT survival predictions), stored in a public repository found by code search
(file id 52308492104).

Kept as written: the data preparation (`get_feature_types`, `get_categoricals` with sklearn's
`LabelEncoder`, `SimpleImputer(add_indicator=True)` and `StandardScaler`, `init_dl` with a
log-transformed time and a shuffled training loader), `CatEmbeddings`, `NN` (xavier-initialised
linear layers, BatchNorm1d and dropout), `LitNN` whole: `save_hyperparameters()` read back
through `self.hparams`, `grad_norm` of the inner model logged with `log_dict` in
`on_before_optimizer_step`, the pairwise hinge loss computed in float64 with its per-race
spread, `train_loss` logged on step and epoch and `race_loss`/`aux_loss` on epoch only, the
validation and test targets gathered in a list and turned into a concordance index at the
epoch's end, Adam with weight decay and a `CosineAnnealingLR` in a scheduler dict with
`"strict": False`; the driver's one fold of `StratifiedKFold(shuffle=True)` drawn from NumPy's
global generator after `seed_everything(42)`, and its Trainer: `ModelCheckpoint(monitor=
"val_loss", save_top_k=1)` though `fit` gets no validation loader (so no checkpoint is ever
written), `LearningRateMonitor(logging_interval='epoch')`, `TQDMProgressBar()`,
`StochasticWeightAveraging(swa_lrs=..., swa_epoch_start=<int>, annealing_epochs=...)`,
`log_every_n_steps=6`, then `trainer.test(model, dl_val)`.
Substituted: pytorch_tabular's `ODST` layer is a linear layer with a tanh; lifelines'
`concordance_index` is a short pairwise count written here; `combinations` stays on the CPU
(no `.cuda()`); the competition's CSV is 64 synthetic patients; sizes and epochs shrunk (five
epochs, SWA from epoch 2, annealed over 2).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, List

import numpy as np
import pandas as pd
import torch
from sklearn.impute import SimpleImputer
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import LabelEncoder, StandardScaler
from torch import nn
from torch.utils.data import TensorDataset

import trainer as pl  # as in Lightning.pytorch
from trainer.callbacks import LearningRateMonitor, StochasticWeightAveraging, TQDMProgressBar
from trainer.utilities import grad_norm


def concordance_index(event_times, predicted_scores, event_observed):
    concordant, comparable = 0.0, 0
    for i in range(len(event_times)):
        for j in range(len(event_times)):
            if event_observed[i] and event_times[i] < event_times[j]:
                comparable += 1
                concordant += 1.0 if predicted_scores[i] < predicted_scores[j] else (
                    0.5 if predicted_scores[i] == predicted_scores[j] else 0.0)
    return concordant / comparable


def get_X_cat(df, cat_cols, transformers=None):
    if transformers is None:
        transformers = [LabelEncoder().fit(df[col]) for col in cat_cols]
    return transformers, np.array(
        [transformer.transform(df[col]) for col, transformer in zip(cat_cols, transformers)]
    ).T


def preprocess_data(train, val, bs):
    X_cat_train, X_cat_val, numerical, transformers = get_categoricals(train, val)
    scaler = StandardScaler()
    imp = SimpleImputer(missing_values=np.nan, strategy='mean', add_indicator=True)
    X_num_train = imp.fit_transform(train[numerical])
    X_num_train = scaler.fit_transform(X_num_train)
    X_num_val = imp.transform(val[numerical])
    X_num_val = scaler.transform(X_num_val)
    dl_train = init_dl(X_cat_train, X_num_train, train, bs, training=True)
    dl_val = init_dl(X_cat_val, X_num_val, val, bs)
    return X_cat_val, X_num_train, X_num_val, dl_train, dl_val, transformers


def get_categoricals(train, val):
    categorical_cols, numerical = get_feature_types(train)
    remove = []
    for col in categorical_cols:
        if train[col].nunique() == 1:
            remove.append(col)
        ind = ~val[col].isin(train[col])
        if ind.any():
            val.loc[ind, col] = np.nan
    categorical_cols = [col for col in categorical_cols if col not in remove]
    transformers, X_cat_train = get_X_cat(train, categorical_cols)
    _, X_cat_val = get_X_cat(val, categorical_cols, transformers)
    return X_cat_train, X_cat_val, numerical, transformers


def init_dl(X_cat, X_num, df, bs, training=False):
    ds_train = TensorDataset(
        torch.tensor(X_cat, dtype=torch.long),
        torch.tensor(X_num, dtype=torch.float32),
        torch.tensor(df.efs_time.values, dtype=torch.float32).log(),
        torch.tensor(df.efs.values, dtype=torch.long)
    )
    dl_train = torch.utils.data.DataLoader(ds_train, batch_size=bs, pin_memory=False, shuffle=training)
    return dl_train


def get_feature_types(train):
    categorical_cols = [col for i, col in enumerate(train.columns) if ((train[col].dtype == "object") | (2 < train[col].nunique() < 25))]
    RMV = ["ID", "efs", "efs_time", "y"]
    FEATURES = [c for c in train.columns if not c in RMV]
    numerical = [i for i in FEATURES if i not in categorical_cols]
    return categorical_cols, numerical


def load_data(rows: int = 64):
    rng = np.random.default_rng(7)
    age = rng.uniform(0, 70, rows)
    age[rng.random(rows) < 0.1] = np.nan
    train = pd.DataFrame({
        "ID": np.arange(rows),
        "race_group": rng.choice(["Asian", "White"], rows),
        "graft_type": rng.choice(["Bone marrow", "Peripheral blood"], rows),
        "karnofsky_score": rng.choice([60.0, 70.0, 80.0, 90.0], rows),
        "age_at_hct": age,
        "donor_age": rng.uniform(18, 60, rows),
        "efs": rng.integers(0, 2, rows),
        "efs_time": rng.uniform(1, 100, rows),
    })
    return train.astype({"race_group": object, "graft_type": object})  # as read_csv gives them


class CatEmbeddings(nn.Module):
    def __init__(
        self,
        projection_dim: int,
        categorical_cardinality: List[int],
        embedding_dim: int
    ):
        super(CatEmbeddings, self).__init__()
        self.embeddings = nn.ModuleList([
            nn.Embedding(cardinality, embedding_dim)
            for cardinality in categorical_cardinality
        ])
        self.projection = nn.Sequential(
            nn.Linear(embedding_dim * len(categorical_cardinality), projection_dim),
            nn.GELU(),
            nn.Linear(projection_dim, projection_dim)
        )

    def forward(self, x_cat):
        x_cat = [embedding(x_cat[:, i]) for i, embedding in enumerate(self.embeddings)]
        x_cat = torch.cat(x_cat, dim=1)
        return self.projection(x_cat)


class ODST(nn.Sequential):
    def __init__(self, in_features: int, num_trees: int):
        super().__init__(nn.Linear(in_features, num_trees), nn.Tanh())


class NN(nn.Module):
    def __init__(
            self,
            continuous_dim: int,
            categorical_cardinality: List[int],
            embedding_dim: int,
            projection_dim: int,
            hidden_dim: int,
            dropout: float = 0
    ):
        super(NN, self).__init__()
        self.embeddings = CatEmbeddings(projection_dim, categorical_cardinality, embedding_dim)
        self.mlp = nn.Sequential(
            ODST(projection_dim + continuous_dim, hidden_dim),
            nn.BatchNorm1d(hidden_dim),
            nn.Dropout(dropout)
        )
        self.out = nn.Linear(hidden_dim, 1)
        self.dropout = nn.Dropout(dropout)

        # initialize weights
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x_cat, x_cont):
        x = self.embeddings(x_cat)
        x = torch.cat([x, x_cont], dim=1)
        x = self.dropout(x)
        x = self.mlp(x)
        return self.out(x), x


@functools.lru_cache
def combinations(N):
    ind = torch.arange(N)
    comb = torch.combinations(ind, r=2)
    return comb


class LitNN(pl.LightningModule):
    def __init__(
            self,
            continuous_dim: int,
            categorical_cardinality: List[int],
            embedding_dim: int,
            projection_dim: int,
            hidden_dim: int,
            lr: float = 1e-3,
            dropout: float = 0.2,
            weight_decay: float = 1e-3,
            aux_weight: float = 0.1,
            margin: float = 0.5,
            race_index: int = 0
    ):
        super(LitNN, self).__init__()
        self.save_hyperparameters()

        self.model = NN(
            continuous_dim=self.hparams.continuous_dim,
            categorical_cardinality=self.hparams.categorical_cardinality,
            embedding_dim=self.hparams.embedding_dim,
            projection_dim=self.hparams.projection_dim,
            hidden_dim=self.hparams.hidden_dim,
            dropout=self.hparams.dropout
        )
        self.targets = []

        self.aux_cls = nn.Sequential(
            nn.Linear(self.hparams.hidden_dim, self.hparams.hidden_dim // 3),
            nn.GELU(),
            nn.Linear(self.hparams.hidden_dim // 3, 1)
        )

    def on_before_optimizer_step(self, optimizer):
        norms = grad_norm(self.model, norm_type=2)
        self.log_dict(norms)

    def forward(self, x_cat, x_cont):
        x, emb = self.model(x_cat, x_cont)
        return x.squeeze(1), emb

    def training_step(self, batch, batch_idx):
        x_cat, x_cont, y, efs = batch
        y_hat, emb = self(x_cat, x_cont)
        aux_pred = self.aux_cls(emb).squeeze(1)
        loss, race_loss = self.get_full_loss(efs, x_cat, y, y_hat)
        aux_loss = nn.functional.mse_loss(aux_pred, y, reduction='none')
        aux_mask = efs == 1
        aux_loss = (aux_loss * aux_mask).sum() / aux_mask.sum()
        self.log("train_loss", loss, on_epoch=True, prog_bar=True, logger=True)
        self.log("race_loss", race_loss, on_epoch=True, prog_bar=True, logger=True, on_step=False)
        self.log("aux_loss", aux_loss, on_epoch=True, prog_bar=True, logger=True, on_step=False)
        return loss + aux_loss * self.hparams.aux_weight

    def get_full_loss(self, efs, x_cat, y, y_hat):
        loss = self.calc_loss(y, y_hat, efs)
        race_loss = self.get_race_losses(efs, x_cat, y, y_hat)
        loss += 0.1 * race_loss
        return loss, race_loss

    def get_race_losses(self, efs, x_cat, y, y_hat):
        races = torch.unique(x_cat[:, self.hparams.race_index])
        race_losses = []
        for race in races:
            ind = x_cat[:, self.hparams.race_index] == race
            race_losses.append(self.calc_loss(y[ind], y_hat[ind], efs[ind]))
        race_loss = sum(race_losses) / len(race_losses)
        races_loss_std = sum((r - race_loss)**2 for r in race_losses) / len(race_losses)
        return torch.sqrt(races_loss_std)

    def calc_loss(self, y, y_hat, efs):
        N = y.shape[0]
        comb = combinations(N)
        comb = comb[(efs[comb[:, 0]] == 1) | (efs[comb[:, 1]] == 1)]
        pred_left = y_hat[comb[:, 0]]
        pred_right = y_hat[comb[:, 1]]
        y_left = y[comb[:, 0]]
        y_right = y[comb[:, 1]]
        y = 2 * (y_left > y_right).int() - 1
        loss = nn.functional.relu(-y * (pred_left - pred_right) + self.hparams.margin)
        mask = self.get_mask(comb, efs, y_left, y_right)
        loss = (loss.double() * (mask.double())).sum() / mask.sum()
        return loss

    def get_mask(self, comb, efs, y_left, y_right):
        left_outlived = y_left >= y_right
        left_1_right_0 = (efs[comb[:, 0]] == 1) & (efs[comb[:, 1]] == 0)
        mask2 = (left_outlived & left_1_right_0)
        right_outlived = y_right >= y_left
        right_1_left_0 = (efs[comb[:, 1]] == 1) & (efs[comb[:, 0]] == 0)
        mask2 |= (right_outlived & right_1_left_0)
        mask2 = ~mask2
        mask = mask2
        return mask

    def validation_step(self, batch, batch_idx):
        x_cat, x_cont, y, efs = batch
        y_hat, emb = self(x_cat, x_cont)
        loss, race_loss = self.get_full_loss(efs, x_cat, y, y_hat)
        self.targets.append([y, y_hat.detach(), efs, x_cat[:, self.hparams.race_index]])
        self.log("val_loss", loss, on_epoch=True, prog_bar=True, logger=True)
        return loss

    def on_validation_epoch_end(self):
        cindex, metric = self._calc_cindex()
        self.log("cindex", metric, on_epoch=True, prog_bar=True, logger=True)
        self.log("cindex_simple", cindex, on_epoch=True, prog_bar=True, logger=True)
        self.targets.clear()

    def _calc_cindex(self):
        y = torch.cat([t[0] for t in self.targets]).cpu().numpy()
        y_hat = torch.cat([t[1] for t in self.targets]).cpu().numpy()
        efs = torch.cat([t[2] for t in self.targets]).cpu().numpy()
        races = torch.cat([t[3] for t in self.targets]).cpu().numpy()
        metric = self._metric(efs, races, y, y_hat)
        cindex = concordance_index(y, y_hat, efs)
        return cindex, metric

    def _metric(self, efs, races, y, y_hat):
        metric_list = []
        for race in np.unique(races):
            y_ = y[races == race]
            y_hat_ = y_hat[races == race]
            efs_ = efs[races == race]
            metric_list.append(concordance_index(y_, y_hat_, efs_))
        metric = float(np.mean(metric_list) - np.sqrt(np.var(metric_list)))
        return metric

    def test_step(self, batch, batch_idx):
        x_cat, x_cont, y, efs = batch
        y_hat, emb = self(x_cat, x_cont)
        loss, race_loss = self.get_full_loss(efs, x_cat, y, y_hat)
        self.targets.append([y, y_hat.detach(), efs, x_cat[:, self.hparams.race_index]])
        self.log("test_loss", loss)
        return loss

    def on_test_epoch_end(self) -> None:
        cindex, metric = self._calc_cindex()
        self.log("test_cindex", metric, on_epoch=True, prog_bar=True, logger=True)
        self.log("test_cindex_simple", cindex, on_epoch=True, prog_bar=True, logger=True)
        self.targets.clear()

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        scheduler_config = {
            "scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizer,
                T_max=4,
                eta_min=6e-3
            ),
            "interval": "epoch",
            "frequency": 1,
            "strict": False,
        }

        return {"optimizer": optimizer, "lr_scheduler": scheduler_config}


def train_final(root_dir, precision, X_num_train, dl_train, dl_val, transformers, hparams=None, categorical_cols=None):
    if hparams is None:
        hparams = {
            "embedding_dim": 2,
            "projection_dim": 4,
            "hidden_dim": 6,
            "lr": 0.06464861983337984,
            "dropout": 0.05463240181423116,
            "aux_weight": 0.26545778308743806,
            "margin": 0.2588153271003354,
            "weight_decay": 0.0002773544957610778
        }
    model = LitNN(
        continuous_dim=X_num_train.shape[1],
        categorical_cardinality=[len(t.classes_) for t in transformers],
        race_index=categorical_cols.index("race_group"),
        **hparams
    )
    checkpoint_callback = pl.callbacks.ModelCheckpoint(monitor="val_loss", save_top_k=1)
    trainer = pl.Trainer(
        accelerator='cpu',
        precision=precision,
        default_root_dir=str(root_dir),
        max_epochs=5,
        log_every_n_steps=6,
        callbacks=[
            checkpoint_callback,
            LearningRateMonitor(logging_interval='epoch'),
            TQDMProgressBar(),
            StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=2, annealing_epochs=2)
        ],
        enable_model_summary=False,
    )
    trainer.fit(model, dl_train)
    fit_metrics = dict(trainer.callback_metrics)
    test = trainer.test(model, dl_val, verbose=False)
    return model, trainer, fit_metrics, test, checkpoint_callback


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    pl.seed_everything(42)
    train_original = load_data()
    categorical_cols, numerical = get_feature_types(train_original)
    kf = StratifiedKFold(n_splits=4, shuffle=True, )
    train_index, test_index = next(iter(kf.split(
        train_original, train_original.race_group.astype(str) + (train_original.karnofsky_score == 90.0).astype(str)
    )))
    tt = train_original.copy()
    train = tt.iloc[train_index]
    val = tt.iloc[test_index]
    X_cat_val, X_num_train, X_num_val, dl_train, dl_val, transformers = preprocess_data(train, val, bs=16)
    model, trainer, fit_metrics, test, checkpoint = train_final(root_dir, precision, X_num_train, dl_train, dl_val,
                                                                transformers, categorical_cols=categorical_cols)
    return {"model": model, "trainer": trainer, "val": fit_metrics, "test": test,
            "lr": trainer.optimizers[0].param_groups[0]["lr"], "best": checkpoint.best_model_path,
            "files": sorted(path.name for path in Path(root_dir).rglob("*.ckpt") if path.name != "last.ckpt"),
            "index": test_index.tolist()}
