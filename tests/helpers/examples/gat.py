"""pytorch/examples' gat at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_gat.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

Two graph attention layers (multi-head, averaged or concatenated), Adam(lr=0.005,
weight_decay=5e-4), NLLLoss, dropout 0.6; one full-graph step per epoch, then the loss and
accuracy on the train and validation nodes (eval mode, no_grad); the test nodes at the end.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers.examples import amp_step, autocast_for, scaler_for
from trainer import Module


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features: int, out_features: int, n_heads: int, concat: bool = False,
                 dropout: float = 0.4, leaky_relu_slope: float = 0.2) -> None:
        super().__init__()
        self.n_heads, self.concat, self.dropout = n_heads, concat, dropout
        self.out_features = out_features
        self.n_hidden = out_features // n_heads if concat else out_features
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))
        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def forward(self, h: torch.Tensor, adj_mat: torch.Tensor) -> torch.Tensor:
        n_nodes = h.shape[0]
        h_transformed = F.dropout(torch.mm(h, self.W), self.dropout, training=self.training)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])
        e = self.leakyrelu(source_scores + target_scores.mT)
        e = torch.where(adj_mat > 0, e, -9e16 * torch.ones_like(e))
        attention = F.dropout(F.softmax(e, dim=-1), self.dropout, training=self.training)
        h_prime = torch.matmul(attention, h_transformed)
        if self.concat:
            return h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        return h_prime.mean(dim=0)


class GAT(Module):
    def __init__(self, in_features: int, n_hidden: int, n_heads: int, num_classes: int, concat: bool = False,
                 dropout: float = 0.4) -> None:
        super().__init__()
        self.gat1 = GraphAttentionLayer(in_features, n_hidden, n_heads, concat, dropout)
        self.gat2 = GraphAttentionLayer(n_hidden, num_classes, 1, False, dropout)
        self.criterion = nn.NLLLoss()
        self.results: list[tuple[float, ...]] = []  # (loss_train, acc_train, loss_val, acc_val) per epoch
        self.test_result: tuple[float, float] | None = None

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.gat2(F.elu(self.gat1(input_tensor, adj_mat)), adj_mat), dim=1)

    def evaluate(self, batch: Any, mask: torch.Tensor) -> tuple[float, float]:  # the script's test()
        output, target = self(batch[0], batch[1])[mask], batch[2][mask]
        loss = self.criterion(output, target)
        return loss.item(), ((output.argmax(dim=1) == target).float().sum() / len(target)).item()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, adj, labels, idx_train = batch[:4]
        return self.criterion(self(features, adj)[idx_train], labels[idx_train])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.results.append(self.evaluate(batch, batch[3]) + self.evaluate(batch, batch[4]))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.test_result = self.evaluate(batch, batch[5])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.005, weight_decay=5e-4)


def make_gat(concat: bool = False) -> tuple[GAT, tuple[torch.Tensor, ...]]:
    """load_cora's processing on a random 30-node graph; seed 13, then the split, then the model."""
    g = torch.Generator().manual_seed(7)
    nodes, edges = 30, 60
    features = (torch.rand(nodes, 12, generator=g) < 0.3).float()
    scale = 1 / torch.sum(features, dim=1)
    scale[scale == float("inf")] = 0
    features = torch.diag(scale).to_sparse() @ features
    labels = torch.randint(0, 3, (nodes,), generator=g)
    pairs = torch.randint(0, nodes, (2, edges), generator=g)
    adj_mat = torch.eye(nodes) + torch.sparse_coo_tensor(pairs, torch.ones(edges), (nodes, nodes), dtype=torch.int64)
    torch.manual_seed(13)
    idx = torch.randperm(len(labels))
    model = GAT(features.shape[1], 8, 2, int(labels.max().item()) + 1, concat, dropout=0.6)
    return model, (features, adj_mat, labels, idx[14:], idx[8:14], idx[:8])


def original_gat(precision: str, epochs: int, concat: bool = False) -> GAT:
    model, batch = make_gat(concat)
    features, adj_mat, labels, idx_train, idx_val, idx_test = batch
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)

    def test(mask: torch.Tensor) -> tuple[float, float]:
        model.eval()
        with torch.no_grad(), autocast():
            return model.evaluate(batch, mask)

    for _ in range(epochs):  # --dry-run breaks after the first
        model.train()
        optimizer.zero_grad()
        with autocast():
            loss = model.criterion(model(features, adj_mat)[idx_train], labels[idx_train])
        amp_step(scaler, optimizer, loss)
        model.results.append(test(idx_train) + test(idx_val))
    model.test_result = test(idx_test)
    return model
