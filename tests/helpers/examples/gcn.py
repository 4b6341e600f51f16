"""pytorch/examples' gcn at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_gcn.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

Two graph convolutions (a sparse normalised adjacency, sparse row-normalised features),
Adam(lr=0.01, weight_decay=5e-4), dropout 0.5, the whole graph as one batch: each epoch one
step, then the loss and accuracy on the train and validation nodes in eval mode; the test
nodes once at the end. Seed 42 before the node split (randperm) and the model.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module


class GraphConv(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, use_bias: bool = False) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor) -> torch.Tensor:
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(Module):
    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, use_bias: bool = True, dropout_p: float = 0.1) -> None:
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)
        self.results: list[tuple[float, float, float, float]] = []
        self.test_result: tuple[float, float] | None = None

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.gc1(input_tensor, adj_mat))
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x.float(), dim=1)

    def evaluate(self, batch: Any, mask: torch.Tensor) -> tuple[float, float]:
        features, adj, labels = batch[:3]
        output, target = self(features, adj)[mask], labels[mask]
        loss = F.nll_loss(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
        return loss.item(), acc.item()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, adj, labels, idx_train = batch[:4]
        output = self(features, adj)
        return F.nll_loss(output[idx_train], labels[idx_train])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.results.append(self.evaluate(batch, batch[3]) + self.evaluate(batch, batch[4]))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.test_result = self.evaluate(batch, batch[5])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01, weight_decay=5e-4)


def graph(nodes: int = 24, features: int = 10, classes: int = 3, edges: int = 40) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random graph processed the way load_cora processes Cora."""
    g = torch.Generator().manual_seed(5)
    x = (torch.rand(nodes, features, generator=g) < 0.3).float()
    scale = 1 / torch.sum(x, dim=1)
    scale[scale == float("inf")] = 0
    x = torch.diag(scale).to_sparse() @ x
    labels = torch.randint(0, classes, (nodes,), generator=g)
    pairs = torch.randint(0, nodes, (2, edges), generator=g)
    adj = torch.sparse_coo_tensor(pairs, torch.ones(edges), (nodes, nodes), dtype=torch.int64)
    adj = torch.eye(nodes) + adj
    degree = torch.sqrt(1 / torch.sum(adj, dim=1))
    degree[degree == float("inf")] = 0
    d = torch.diag(degree).to_sparse()
    adj = d @ adj @ d
    return x.to_sparse(), labels, adj.to_sparse()


def make_gcn() -> tuple[GCN, tuple[torch.Tensor, ...]]:
    features, labels, adj = graph()
    torch.manual_seed(42)
    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:8], idx[8:14], idx[14:]
    model = GCN(features.shape[1], 8, int(labels.max().item()) + 1, False, 0.5)
    return model, (features, adj, labels, idx_train, idx_val, idx_test)


def original_gcn(precision: str, epochs: int = 4) -> GCN:
    model, batch = make_gcn()
    features, adj, labels, idx_train, idx_val, idx_test = batch
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def test(mask: torch.Tensor) -> tuple[float, float]:
        model.eval()
        with torch.no_grad(), autocast():
            return model.evaluate(batch, mask)

    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        with autocast():
            output = model(features, adj)
            loss = F.nll_loss(output[idx_train], labels[idx_train])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        model.results.append(test(idx_train) + test(idx_val))
    model.test_result = test(idx_test)
    return model
