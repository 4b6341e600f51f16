"""The UvA deep-learning course's "Graph Neural Networks" notebook (Lightning-AI/tutorials,
course_UvA-DL/06-graph-neural-networks/overview.py), its node-level part with the notebook's
MLP (the part that needs no torch_geometric layer), with only its imports changed:
`NodeLevelGNN` (save_hyperparameters of `model_name` and `**model_kwargs`, a `forward(data,
mode)` that picks the node mask, SGD with momentum and weight decay, accuracies logged by
train/val/test step) and `train_node_classifier`: `pl.seed_everything(42)`, a loader of one
whole graph (`batch_size=1`) used for training, validation and test,
`ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc")`,
`enable_progress_bar=False`, `trainer.logger._default_hp_metric = None`, `pl.seed_everything()`
without a seed before the model is built, `load_from_checkpoint(best_model_path)`, then
`trainer.test` and the module's own `forward` on a batch taken from the loader again.

Shrunk or substituted: the Cora graph is a seeded random graph of 60 nodes with 12 features
and 4 classes; torch_geometric's `Data`/`Batch` and its loader are a small `Graph` class (its
attributes, `.to()`, iteration over `(name, value)` pairs and `num_graphs`, as `Batch` has)
and a plain `DataLoader` whose `collate_fn` hands the one graph over; 10 epochs instead of 200;
`accelerator="cpu", devices=1` instead of `devices=AVAIL_GPUS` (0 without a GPU, which both
Lightning and this package refuse).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import ModelCheckpoint


class Graph:
    """What the notebook reads of torch_geometric's `Batch`: named tensors as attributes."""

    def __init__(self, **tensors: torch.Tensor) -> None:
        self.__dict__["_store"] = dict(tensors)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_store"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._store[name] = value

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        yield from self._store.items()

    def __len__(self) -> int:
        return len(self._store)

    @property
    def num_graphs(self) -> int:
        return 1

    def to(self, device: Any, *args: Any, non_blocking: bool = False) -> Graph:
        return Graph(**{k: v.to(device, non_blocking=non_blocking) for k, v in self._store.items()})


def cora_like() -> Graph:
    g = torch.Generator().manual_seed(11)
    nodes, features, classes = 60, 12, 4
    y = torch.randint(classes, (nodes,), generator=g)
    x = torch.randn(nodes, features, generator=g) + torch.randn(classes, features, generator=g)[y]
    edge_index = torch.randint(nodes, (2, 150), generator=g)
    split = torch.randperm(nodes, generator=g)
    masks = [torch.zeros(nodes, dtype=torch.bool) for _ in range(3)]
    masks[0][split[:20]], masks[1][split[20:40]], masks[2][split[40:]] = True, True, True
    return Graph(x=x, edge_index=edge_index, y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                 batch=torch.zeros(nodes, dtype=torch.long), ptr=torch.tensor([0, nodes]))


class OneGraph(data.Dataset):
    num_node_features, num_classes = 12, 4

    def __init__(self) -> None:
        self.graph = cora_like()

    def __len__(self) -> int:
        return 1

    def __getitem__(self, idx: int) -> Graph:
        return self.graph


class MLPModel(nn.Module):
    def __init__(self, c_in: int, c_hidden: int, c_out: int, num_layers: int = 2, dp_rate: float = 0.1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels, out_channels = c_in, c_hidden
        for _ in range(num_layers - 1):
            layers += [nn.Linear(in_channels, out_channels), nn.ReLU(inplace=True), nn.Dropout(dp_rate)]
            in_channels = c_hidden
        layers += [nn.Linear(in_channels, c_out)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.layers(x)


class NodeLevelGNN(pl.LightningModule):
    def __init__(self, model_name: str, **model_kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        if model_name == "MLP":
            self.model = MLPModel(**model_kwargs)
        else:
            raise ValueError("the GNN layers need torch_geometric")
        self.loss_module = nn.CrossEntropyLoss()

    def forward(self, data: Graph, mode: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        x, edge_index = data.x, data.edge_index
        x = self.model(x, edge_index)
        if mode == "train":
            mask = data.train_mask
        elif mode == "val":
            mask = data.val_mask
        elif mode == "test":
            mask = data.test_mask
        else:
            assert False, f"Unknown forward mode: {mode}"
        loss = self.loss_module(x[mask], data.y[mask])
        acc = (x[mask].argmax(dim=-1) == data.y[mask]).sum().float() / mask.sum()
        return loss, acc

    def configure_optimizers(self) -> optim.Optimizer:
        return optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-3)

    def training_step(self, batch: Graph, batch_idx: int) -> torch.Tensor:
        loss, acc = self.forward(batch, mode="train")
        self.log("train_loss", loss)
        self.log("train_acc", acc)
        return loss

    def validation_step(self, batch: Graph, batch_idx: int) -> None:
        _, acc = self.forward(batch, mode="val")
        self.log("val_acc", acc)

    def test_step(self, batch: Graph, batch_idx: int) -> None:
        _, acc = self.forward(batch, mode="test")
        self.log("test_acc", acc)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 10) -> dict[str, Any]:
    """The notebook's `train_node_classifier(model_name="MLP", dataset=cora_dataset, c_hidden=16,
    num_layers=2, dp_rate=0.1)`, after its first cell's `pl.seed_everything(42)`."""
    pl.seed_everything(42)
    dataset = OneGraph()
    model_name, model_kwargs = "MLP", {"c_hidden": 16, "num_layers": 2, "dp_rate": 0.1}
    pl.seed_everything(42)
    node_data_loader = data.DataLoader(dataset, batch_size=1, collate_fn=lambda graphs: graphs[0])
    trainer = pl.Trainer(
        default_root_dir=os.path.join(str(root_dir), "NodeLevel" + model_name),
        callbacks=[ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc")],
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        precision=precision,
        enable_progress_bar=False,
    )
    trainer.logger._default_hp_metric = None
    pl.seed_everything()
    trained = NodeLevelGNN(model_name=model_name, c_in=dataset.num_node_features, c_out=dataset.num_classes, **model_kwargs)
    trainer.fit(trained, node_data_loader, node_data_loader)
    fit_metrics = dict(trainer.callback_metrics)
    model = NodeLevelGNN.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    test_result = trainer.test(model, dataloaders=node_data_loader, verbose=False)
    batch = next(iter(node_data_loader))
    batch = batch.to(model.device)
    _, train_acc = model.forward(batch, mode="train")
    _, val_acc = model.forward(batch, mode="val")
    result = {"train": train_acc, "val": val_acc, "test": test_result[0]["test_acc"]}
    return {"model": trained, "trainer": trainer, "best": model, "fit_metrics": fit_metrics, "test": test_result[0], "result": result}
