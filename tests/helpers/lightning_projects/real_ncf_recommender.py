"""Neural collaborative filtering on MovieLens ratings, from Ceglowa/sys-rek-l1 (`ncf/ncf.py`:
`NCF`; `movielens_dataset.py`: `MovielensDataModule`, `MovieLensDataset`).

Kept as written: `NCF` (user and item embeddings, two dropout MLP layers, a sigmoid output,
MSE on the squeezed prediction, `train_loss` with `on_step=False, on_epoch=True`, `val_loss` and
`val_mae`, Adam with its defaults); the DataModule's `setup(self, **kwargs)` (no `stage`
parameter: it takes the stage only by name, as Lightning passes it), its pandas merges onto
positional ids, `MinMaxScaler` on the ratings, the sort by timestamp and sklearn's
`train_test_split` (drawing from NumPy's global generator), and its loaders with DataLoader's
default batch size of 1 over numpy rows (each batch three `(1, 1)` tensors, ratings float64).
Substituted: `get_movielens_1m()` is 30 users, 20 movies and 60 random ratings as the same
three DataFrames; embedding and layer sizes shrunk (4, 8, 4); the script's driver (not in the
repo) is a two-epoch `fit` with the DataModule then `validate` and `test`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from torch.utils.data import DataLoader, Dataset

import trainer as pl
from trainer import LightningDataModule


def get_movielens_1m():
    rng = np.random.default_rng(5)
    movies = pd.DataFrame({"MovieID": np.arange(100, 120), "Title": [f"movie {i}" for i in range(20)]})
    users = pd.DataFrame({"UserID": np.arange(1, 31), "Gender": rng.choice(["F", "M"], 30)})
    ratings = pd.DataFrame({"UserID": rng.integers(1, 31, 60), "MovieID": rng.integers(100, 120, 60),
                            "Rating": rng.integers(1, 6, 60), "Timestamp": rng.permutation(60) + 10**9})
    return movies, users, ratings


class NCF(pl.LightningModule):
    def __init__(self, embedding_size, first_layer_size, second_layer_size, dropout_prob, n_users, n_items):
        super().__init__()
        self.user_embedding = nn.Embedding(num_embeddings=n_users, embedding_dim=embedding_size)
        self.item_embedding = nn.Embedding(num_embeddings=n_items, embedding_dim=embedding_size)
        self.fc1 = nn.Linear(in_features=2 * embedding_size, out_features=first_layer_size)
        self.d1 = nn.Dropout(p=dropout_prob)
        self.fc2 = nn.Linear(in_features=first_layer_size, out_features=second_layer_size)
        self.d2 = nn.Dropout(p=dropout_prob)
        self.output = nn.Linear(in_features=second_layer_size, out_features=1)

    def forward(self, user_input, item_input):
        user_embedded = self.user_embedding(user_input)
        item_embedded = self.item_embedding(item_input)
        vector = torch.cat([user_embedded, item_embedded], dim=-1)
        vector = self.d1(nn.ReLU()(self.fc1(vector)))
        vector = self.d2(nn.ReLU()(self.fc2(vector)))
        pred = nn.Sigmoid()(self.output(vector))
        return pred

    def training_step(self, batch, batch_idx):
        user_input, item_input, labels = batch
        predicted_labels = self(user_input, item_input)
        loss = nn.MSELoss()(predicted_labels.squeeze(-1), labels.float())
        self.log('train_loss', loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        user_input, item_input, labels = batch
        predicted_labels = self(user_input, item_input)
        loss = nn.MSELoss()(predicted_labels.squeeze(-1), labels.float())
        mae = nn.L1Loss()(predicted_labels.squeeze(-1), labels.float())
        self.log('val_loss', loss, on_step=False, on_epoch=True)
        self.log('val_mae', mae, on_step=False, on_epoch=True)

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())


class MovielensDataModule(LightningDataModule):
    def prepare_data(self, *args, **kwargs):
        pass

    def __init__(self):
        super().__init__()
        self.user_train = None
        self.user_test = None
        self.movie_train = None
        self.movie_test = None
        self.rating_train = None
        self.rating_test = None
        self.movies = None
        self.users = None
        self.ratings = None
        self.stages = []

    def setup(self, **kwargs):
        self.stages.append(kwargs["stage"].value)
        movies_df, users_df, ratings_df = get_movielens_1m()
        self.movies = movies_df
        self.users = users_df
        self.ratings = ratings_df
        self.movies['m_id'] = self.movies.index
        self.users['u_id'] = self.users.index
        self.ratings = self.ratings.merge(self.movies[['MovieID', 'm_id']], left_on='MovieID', right_on='MovieID')
        self.ratings = self.ratings.merge(self.users[['UserID', 'u_id']], left_on='UserID', right_on='UserID')
        self.ratings['rating_scaled'] = MinMaxScaler().fit_transform(ratings_df['Rating'].values[:, None])
        self.ratings.sort_values(by='Timestamp', inplace=True)
        user_ids = self.ratings['u_id'].values[:, None]
        movie_ids = self.ratings['m_id'].values[:, None]
        rating = self.ratings['rating_scaled'].values[:, None]
        user_train, user_test, movie_train, movie_test, rating_train, rating_test = train_test_split(user_ids, movie_ids, rating)
        self.user_train = user_train
        self.user_test = user_test
        self.movie_train = movie_train
        self.movie_test = movie_test
        self.rating_train = rating_train
        self.rating_test = rating_test

    def train_dataloader(self):
        train_split = MovieLensDataset(self.user_train, self.movie_train, self.rating_train)
        return DataLoader(train_split)

    def val_dataloader(self):
        val_split = MovieLensDataset(self.user_test, self.movie_test, self.rating_test)
        return DataLoader(val_split)

    def test_dataloader(self):
        val_split = MovieLensDataset(self.user_test, self.movie_test, self.rating_test)
        return DataLoader(val_split)

    def teardown(self, **kwargs):
        self.stages.append("teardown " + kwargs["stage"].value)


class MovieLensDataset(Dataset):
    def __init__(self, user_ids, movie_ids, ratings):
        self.user_ids = user_ids
        self.movie_ids = movie_ids
        self.ratings = ratings

    def __len__(self):
        return len(self.user_ids)

    def __getitem__(self, idx):
        return self.user_ids[idx], self.movie_ids[idx], self.ratings[idx]


class StageWatcher(pl.Callback):
    def __init__(self):
        self.seen = []

    def setup(self, trainer, pl_module, **kwargs):
        self.seen.append(("setup", kwargs["stage"].value))

    def teardown(self, trainer, pl_module, **kwargs):
        self.seen.append(("teardown", kwargs["stage"].value))


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 2) -> dict[str, Any]:
    pl.seed_everything(11)
    model = NCF(embedding_size=4, first_layer_size=8, second_layer_size=4, dropout_prob=0.2, n_users=30, n_items=20)
    data = MovielensDataModule()
    watcher = StageWatcher()
    trainer = pl.Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=str(root_dir),
                         callbacks=[watcher], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=10)
    trainer.fit(model, datamodule=data)
    fit_metrics = dict(trainer.callback_metrics)
    val = trainer.validate(model, datamodule=data, verbose=False)
    test = trainer.test(model, datamodule=data, verbose=False)
    return {"model": model, "trainer": trainer, "val": fit_metrics, "validate": val, "test": test,
            "stages": data.stages, "seen": watcher.seen}
