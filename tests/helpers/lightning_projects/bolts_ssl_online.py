"""Lightning Bolts' `SSLOnlineEvaluator` (pl_bolts/callbacks/ssl_online.py, with its
`SSLEvaluator` MLP from pl_bolts/models/self_supervised/evaluator.py) and
`KNNOnlineEvaluator` (pl_bolts/callbacks/knn_online.py), copied as written (docstrings left
out). The first is a callback that trains its own classifier on the module's frozen
representations in `on_train_batch_end` (its own Adam, its own backward), logs from the
callback's hooks, reads `trainer.datamodule.num_classes`/`.name` in `setup`, looks at
`trainer._accelerator_connector` in `on_fit_start`, and keeps its MLP and optimizer in the
checkpoint through `state_dict`/`load_state_dict`. The second, at each validation's end,
runs the module over `trainer.train_dataloader` (drawing a new shuffled order) and
`trainer.val_dataloaders` and logs a k-NN accuracy. Lightning 2 gives `val_dataloaders` as the
loader itself when there is one (bolts iterated it as a list): the minimal fix, for both, wraps
it in a list.

The module is a small SimSiam-style two-view learner written for this test (bolts' SSL
models need torchvision). Shrunk: 64 rows of 12 features, 4 classes, two epochs, then a
resume to three from a checkpoint. Data: three noisy views of each row (`inputs[-1]` is the
view the evaluator reads, as bolts' transforms put it last)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torch.optim import Optimizer
from torch.utils.data import DataLoader, Dataset
from torchmetrics.functional import accuracy

from trainer import Callback, LightningDataModule, LightningModule, Trainer, seed_everything
from trainer.utilities import rank_zero_warn


# ---------------------------------------------------------------- pl_bolts/models/self_supervised/evaluator.py
class SSLEvaluator(nn.Module):
    def __init__(self, n_input, n_classes, n_hidden=512, p=0.1) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.n_input = n_input
        self.n_classes = n_classes
        self.n_hidden = n_hidden
        if n_hidden is None:
            self.block_forward = nn.Sequential(Flatten(), nn.Dropout(p=p), nn.Linear(n_input, n_classes, bias=True))
        else:
            self.block_forward = nn.Sequential(
                Flatten(), nn.Dropout(p=p), nn.Linear(n_input, n_hidden, bias=False), nn.BatchNorm1d(n_hidden),
                nn.ReLU(inplace=True), nn.Dropout(p=p), nn.Linear(n_hidden, n_classes, bias=True),
            )

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.block_forward(x)


class Flatten(nn.Module):
    def forward(self, input_tensor):  # type: ignore[no-untyped-def]
        return input_tensor.view(input_tensor.size(0), -1)


# ---------------------------------------------------------------- pl_bolts/callbacks/ssl_online.py
class SSLOnlineEvaluator(Callback):  # pragma: no cover
    def __init__(self, z_dim: int, drop_p: float = 0.2, hidden_dim: Optional[int] = None, num_classes: Optional[int] = None,
                 dataset: Optional[str] = None) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.hidden_dim = hidden_dim
        self.drop_p = drop_p
        self.optimizer: Optional[Optimizer] = None
        self.online_evaluator: Optional[SSLEvaluator] = None
        self.num_classes: Optional[int] = None
        self.dataset: Optional[str] = None
        self.num_classes: Optional[int] = num_classes  # type: ignore[no-redef]
        self.dataset: Optional[str] = dataset  # type: ignore[no-redef]
        self._recovered_callback_state: Optional[Dict[str, Any]] = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: Optional[str] = None) -> None:
        if self.num_classes is None:
            self.num_classes = trainer.datamodule.num_classes
        if self.dataset is None:
            self.dataset = trainer.datamodule.name

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.online_evaluator = SSLEvaluator(n_input=self.z_dim, n_classes=self.num_classes, p=self.drop_p, n_hidden=self.hidden_dim).to(pl_module.device)
        accel = trainer.accelerator_connector if hasattr(trainer, "accelerator_connector") else trainer._accelerator_connector
        if accel.is_distributed:
            if accel.use_ddp:
                from torch.nn.parallel import DistributedDataParallel

                self.online_evaluator = DistributedDataParallel(self.online_evaluator, device_ids=[pl_module.device])
            elif accel.use_dp:
                from torch.nn.parallel import DataParallel

                self.online_evaluator = DataParallel(self.online_evaluator, device_ids=[pl_module.device])
            else:
                rank_zero_warn("Does not support this type of distributed accelerator. The online evaluator will not sync.")
        self.optimizer = torch.optim.Adam(self.online_evaluator.parameters(), lr=1e-4)
        if self._recovered_callback_state is not None:
            self.online_evaluator.load_state_dict(self._recovered_callback_state["state_dict"])
            self.optimizer.load_state_dict(self._recovered_callback_state["optimizer_state"])

    def to_device(self, batch: Sequence, device: Union[str, torch.device]) -> Tuple[Tensor, Tensor]:
        if self.dataset == "stl10":
            labeled_batch = batch[1]
            batch = labeled_batch
        inputs, y = batch
        x = inputs[-1]
        x = x.to(device)
        y = y.to(device)
        return x, y

    def shared_step(self, pl_module: LightningModule, batch: Sequence):  # type: ignore[no-untyped-def]
        with torch.no_grad(), set_training(pl_module, False):
            x, y = self.to_device(batch, pl_module.device)
            representations = pl_module(x).flatten(start_dim=1)
        mlp_logits = self.online_evaluator(representations)  # type: ignore[operator]
        mlp_loss = F.cross_entropy(mlp_logits, y)
        acc = accuracy(mlp_logits.softmax(-1), y, task="multiclass", num_classes=self.num_classes)
        return acc, mlp_loss

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Sequence, batch: Sequence, batch_idx: int) -> None:
        train_acc, mlp_loss = self.shared_step(pl_module, batch)
        mlp_loss.backward()
        self.optimizer.step()  # type: ignore[union-attr]
        self.optimizer.zero_grad()  # type: ignore[union-attr]
        pl_module.log("online_train_acc", train_acc, on_step=True, on_epoch=False)
        pl_module.log("online_train_loss", mlp_loss, on_step=True, on_epoch=False)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Sequence, batch: Sequence, batch_idx: int,
                                dataloader_idx: int = 0) -> None:  # bolts: no default (Lightning 2 passes it only with several loaders)
        val_acc, mlp_loss = self.shared_step(pl_module, batch)
        pl_module.log("online_val_acc", val_acc, on_step=False, on_epoch=True, sync_dist=True)
        pl_module.log("online_val_loss", mlp_loss, on_step=False, on_epoch=True, sync_dist=True)

    def state_dict(self) -> dict:
        return {"state_dict": self.online_evaluator.state_dict(), "optimizer_state": self.optimizer.state_dict()}  # type: ignore[union-attr]

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._recovered_callback_state = state_dict


# ---------------------------------------------------------------- pl_bolts/callbacks/knn_online.py
class KNNOnlineEvaluator(Callback):
    def __init__(self, k: int = 200, temperature: float = 0.07) -> None:
        self.num_classes: Optional[int] = None
        self.dataset: Optional[int] = None
        self.k = k
        self.temperature = temperature

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: Optional[str] = None) -> None:
        self.num_classes = trainer.datamodule.num_classes
        self.dataset = trainer.datamodule.name

    def predict(self, query_feature: Tensor, feature_bank: Tensor, target_bank: Tensor) -> Tensor:
        dim_b = query_feature.shape[0]
        sim_matrix = query_feature @ feature_bank.T
        sim_weight, sim_indices = sim_matrix.topk(k=self.k, dim=-1)
        sim_labels = torch.gather(target_bank.expand(dim_b, -1), dim=-1, index=sim_indices)
        sim_weight = (sim_weight / self.temperature).exp()
        one_hot_label = torch.zeros(dim_b * self.k, self.num_classes, device=sim_labels.device)  # type: ignore[arg-type]
        one_hot_label = one_hot_label.scatter(dim=-1, index=sim_labels.view(-1, 1), value=1.0)
        pred_scores = torch.sum(one_hot_label.view(dim_b, -1, self.num_classes) * sim_weight.unsqueeze(dim=-1), dim=1)  # type: ignore[arg-type]
        return pred_scores.argsort(dim=-1, descending=True)

    def to_device(self, batch: Tensor, device: Union[str, torch.device]) -> Tuple[Tensor, Tensor]:
        if self.dataset == "stl10":
            labeled_batch = batch[1]
            batch = labeled_batch
        inputs, y = batch
        x = inputs[-1]
        x = x.to(device)
        y = y.to(device)
        return x, y

    @torch.no_grad()
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        assert not trainer.model.training
        if trainer.train_dataloader is None:
            return
        total_top1, total_num, feature_bank, target_bank = 0.0, 0, [], []
        for batch in trainer.train_dataloader:
            x, target = self.to_device(batch, pl_module.device)
            feature = pl_module(x).flatten(start_dim=1)
            feature = F.normalize(feature, dim=1)
            feature_bank.append(feature)
            target_bank.append(target)
        feature_bank = torch.cat(feature_bank, dim=0)  # type: ignore[assignment]
        target_bank = torch.cat(target_bank, dim=0)  # type: ignore[assignment]
        accel = trainer.accelerator_connector if hasattr(trainer, "accelerator_connector") else trainer._accelerator_connector
        if accel.is_distributed:
            raise NotImplementedError("concat_all_gather: one process here")
        loaders = trainer.val_dataloaders  # Lightning 2: the loader itself when there is one (bolts: a list)
        for val_dataloader in loaders if isinstance(loaders, (list, tuple)) else [loaders]:
            for batch in val_dataloader:
                x, target = self.to_device(batch, pl_module.device)
                feature = pl_module(x).flatten(start_dim=1)
                feature = F.normalize(feature, dim=1)
                pred_labels = self.predict(feature, feature_bank, target_bank)  # type: ignore[arg-type]
                total_num += x.shape[0]
                total_top1 += (pred_labels[:, 0] == target).float().sum().item()
        pl_module.log("online_knn_val_acc", total_top1 / total_num, on_step=False, on_epoch=True, sync_dist=True)


@contextmanager
def set_training(module: nn.Module, mode: bool):  # type: ignore[no-untyped-def]
    original_mode = module.training
    try:
        module.train(mode)
        yield module
    finally:
        module.train(original_mode)


# ---------------------------------------------------------------- the project
class Views(Dataset):
    def __init__(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(64, 12, generator=generator)
        self.y = self.x[:, :4].argmax(dim=1)
        self.noise = 0.1 * torch.randn(3, 64, 12, generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        return [self.x[i] + self.noise[k, i] for k in range(3)], self.y[i]


class ViewsData(LightningDataModule):
    num_classes = 4
    name = "synthetic"

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Views(1), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Views(2), batch_size=32)


class SimSiamLite(LightningModule):
    def __init__(self, z_dim: int = 8) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, z_dim))
        self.predictor = nn.Sequential(nn.Linear(z_dim, 8), nn.ReLU(), nn.Linear(8, z_dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        (v1, v2, _), _ = batch
        z1, z2 = self.encoder(v1), self.encoder(v2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        loss = -(F.cosine_similarity(p1, z2.detach()).mean() + F.cosine_similarity(p2, z1.detach()).mean()) / 2
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (v1, v2, _), _ = batch
        self.log("val_cos", F.cosine_similarity(self.encoder(v1), self.encoder(v2)).mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main(root_dir: str | Path, precision: str = "32-true", resume: bool = True, knn: bool = True, **options: Any) -> dict[str, Any]:
    """Two epochs, a checkpoint, and a new module, callback and Trainer resuming to three
    (`resume=False`: the three epochs in one go)."""
    root = Path(root_dir)
    seed_everything(11)
    model, online = SimSiamLite(), SSLOnlineEvaluator(z_dim=8, hidden_dim=16)
    knn = KNNOnlineEvaluator(k=10, temperature=0.1) if knn else None
    settings = dict(default_root_dir=root, accelerator="cpu", precision=precision, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, enable_checkpointing=False, **options)
    trainer = Trainer(max_epochs=2 if resume else 3, callbacks=[online, *([knn] if knn else [])], **settings)
    trainer.fit(model, datamodule=ViewsData())
    first = {"metrics": dict(trainer.callback_metrics), "evaluator": {k: v.clone() for k, v in online.online_evaluator.state_dict().items()}}
    if resume:
        trainer.save_checkpoint(root / "two_epochs.ckpt")
        model, online = SimSiamLite(), SSLOnlineEvaluator(z_dim=8, hidden_dim=16)  # as a new process would build them
        trainer = Trainer(max_epochs=3, callbacks=[online, *([KNNOnlineEvaluator(k=10, temperature=0.1)] if knn else [])], **settings)
        trainer.fit(model, datamodule=ViewsData(), ckpt_path=root / "two_epochs.ckpt")
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "first": first,
            "evaluator": online.online_evaluator, "optimizer": online.optimizer}
