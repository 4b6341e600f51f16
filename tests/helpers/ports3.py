"""A third set of pytorch/examples (gat, reinforcement_learning, imagenet), each written twice:
the original script's own loop (the `original_*` functions) and a `trainer.Module` port (the
classes' hooks), compared by tests/test_script_parity3.py (which writes three more itself).

Architectures are the examples' at toy sizes, data is synthetic and shaped like each example's
(no downloads), seeds, optimizers, schedulers, loss reductions, train/eval switches and loader
settings are the scripts'. Amp/bf16 originals follow PyTorch's autocast recipe (autocast
around forward and loss, one GradScaler), as tests/helpers/ports.py does.
"""

from __future__ import annotations

import itertools
import math
from collections import deque, namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical
from torch.utils.data import DataLoader, Dataset

from tests.helpers.ports import autocast_for, scaler_for
from trainer import Module


def amp_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    scaler.scale(loss).backward()  # a plain backward and step when the scaler is disabled
    scaler.step(optimizer)
    scaler.update()


# ------------------------------------------------------------------------------------ gat
# Two graph attention layers (multi-head, averaged or concatenated), Adam(lr=0.005,
# weight_decay=5e-4), NLLLoss, dropout 0.6; one full-graph step per epoch, then the loss and
# accuracy on the train and validation nodes (eval mode, no_grad); the test nodes at the end.
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


# ------------------------------------------------------------- reinforcement_learning
# CartPole replaced by its own equations in torch (float32 state, a reset generator of its
# own like gym's np_random, episodes truncated at MAX_T). One optimizer step per episode
# (finish_episode), `for i_episode in count(1)` until the running reward passes the
# threshold: in the port an endless iterable of episode numbers and `should_stop`.
MAX_T, THRESHOLD, EPISODE_CAP = 20, 12.0, 80
EPS = np.finfo(np.float32).eps.item()


class CartPole:
    def __init__(self) -> None:
        self.gen = torch.Generator()  # gym's np_random

    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is not None:
            self.gen.manual_seed(seed)
        self.state, self.t = torch.rand(4, generator=self.gen) * 0.1 - 0.05, 0
        return self.state.clone(), {}

    def step(self, action: int) -> tuple[torch.Tensor, float, bool, bool, dict[str, Any]]:
        x, x_dot, theta, theta_dot = self.state.tolist()
        force, cos, sin = (10.0 if action == 1 else -10.0), math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        thetaacc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        xacc = temp - 0.05 * thetaacc * cos / 1.1
        self.state = torch.tensor([x + 0.02 * x_dot, x_dot + 0.02 * xacc, theta + 0.02 * theta_dot,
                                   theta_dot + 0.02 * thetaacc])
        self.t += 1
        terminated = abs(self.state[0].item()) > 2.4 or abs(self.state[2].item()) > 12 * 2 * math.pi / 360
        return self.state.clone(), 1.0, terminated, self.t >= MAX_T, {}


def episodes() -> Iterator[int]:
    return itertools.islice(itertools.count(1), EPISODE_CAP)  # count(1), capped so a test always ends


class Agent(Module):
    """main()'s episode and finish_episode(); subclasses are the two scripts' policies."""

    lr = 1e-2

    def __init__(self, env: CartPole) -> None:
        super().__init__()
        self.env, self.gamma, self.running_reward = env, 0.99, 10.0
        self.saved: list[Any] = []  # saved_log_probs / saved_actions
        self.rewards: list[float] = []
        self.ep_rewards: list[float] = []

    def run_episode(self) -> None:
        state, _ = self.env.reset()
        ep_reward = 0.0
        for _ in range(1, 10000):
            state, reward, terminated, truncated, _ = self.env.step(self.select_action(state))
            self.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break
        self.running_reward = 0.05 * ep_reward + (1 - 0.05) * self.running_reward
        self.ep_rewards.append(ep_reward)

    def returns(self) -> torch.Tensor:
        R, returns = 0.0, deque()
        for r in self.rewards[::-1]:
            R = r + self.gamma * R
            returns.appendleft(R)
        t = torch.tensor(returns)
        return (t - t.mean()) / (t.std() + EPS)

    def solved(self) -> bool:
        return self.running_reward > THRESHOLD

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.run_episode()
        loss = self.episode_loss()
        if self.solved():
            self.trainer.should_stop = True
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class Reinforce(Agent):
    def __init__(self, env: CartPole, hidden: int = 32) -> None:
        super().__init__(env)
        self.affine1, self.dropout, self.affine2 = nn.Linear(4, hidden), nn.Dropout(p=0.6), nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.affine2(F.relu(self.dropout(self.affine1(x)))), dim=1)

    def select_action(self, state: torch.Tensor) -> int:
        m = Categorical(self(state.float().unsqueeze(0)))
        action = m.sample()
        self.saved.append(m.log_prob(action))
        return int(action.item())

    def episode_loss(self) -> torch.Tensor:
        loss = torch.cat([-log_prob * R for log_prob, R in zip(self.saved, self.returns())]).sum()
        del self.rewards[:], self.saved[:]
        return loss


SavedAction = namedtuple("SavedAction", ["log_prob", "value"])


class ActorCritic(Agent):
    lr = 3e-2

    def __init__(self, env: CartPole, hidden: int = 32) -> None:
        super().__init__(env)
        self.affine1 = nn.Linear(4, hidden)
        self.action_head, self.value_head = nn.Linear(hidden, 2), nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)

    def select_action(self, state: torch.Tensor) -> int:
        probs, state_value = self(state.float())
        m = Categorical(probs)
        action = m.sample()
        self.saved.append(SavedAction(m.log_prob(action), state_value))
        return int(action.item())

    def episode_loss(self) -> torch.Tensor:
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(self.saved, self.returns()):
            policy_losses.append(-log_prob * (R - value.item()))
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
        del self.rewards[:], self.saved[:]
        return torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()


AGENTS = {"reinforce": Reinforce, "actor_critic": ActorCritic}


def make_agent(kind: str) -> Agent:
    env = CartPole()  # the scripts: the env, env.reset(seed=543), torch.manual_seed(543), the policy
    env.reset(seed=543)
    torch.manual_seed(543)
    return AGENTS[kind](env)


def original_agent(kind: str, precision: str) -> Agent:
    model = make_agent(kind)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adam(model.parameters(), lr=model.lr)
    for _ in episodes():
        with autocast():
            model.run_episode()
            loss = model.episode_loss()
        optimizer.zero_grad()
        amp_step(scaler, optimizer, loss)
        if model.solved():
            break
    return model


# ------------------------------------------------------------------------------- imagenet
# resnet18's shape at toy size (conv-BN-ReLU stem, a BasicBlock, pooling, fc), CrossEntropyLoss,
# SGD(0.1, momentum=0.9, weight_decay=1e-4), StepLR(gamma=0.1) after each validation (step 30
# of 90 epochs; here 2 of 3), AverageMeters of loss/acc@1/acc@5 weighted by batch size, best
# acc@1 kept; RandomHorizontalFlip on training images (a torch.rand draw per image, in the
# workers when the loader has them). `--seed` seeds Python's and torch's generators.
class AverageMeter:
    def __init__(self, name: str) -> None:
        self.name, self.val, self.avg, self.sum, self.count = name, 0, 0, 0, 0

    def update(self, val: Any, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def meters() -> list[AverageMeter]:
    return [AverageMeter("Loss"), AverageMeter("Acc@1"), AverageMeter("Acc@5")]


def accuracy(output: torch.Tensor, target: torch.Tensor, topk: tuple[int, ...] = (1,)) -> list[torch.Tensor]:
    with torch.no_grad():
        _, pred = output.topk(max(topk), 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0)) for k in topk]


class TinyResNet(Module):
    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU(inplace=True), nn.Conv2d(width, width, 3, 1, 1, bias=False),
                                   nn.BatchNorm2d(width))
        self.fc = nn.Linear(width, classes)
        self.criterion = nn.CrossEntropyLoss()
        self.train_summaries: list[tuple[float, ...]] = []
        self.val_acc1: list[float] = []
        self.best_acc1: Any = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(x + self.block(x)), 1), 1))

    def step(self, batch: Any, meters: list[AverageMeter]) -> torch.Tensor:  # train()'s and validate()'s body
        images, target = batch
        output = self(images)
        loss = self.criterion(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        for meter, value in zip(meters, (loss.item(), acc1[0], acc5[0])):
            meter.update(value, images.size(0))
        return loss

    def remember(self, train: list[AverageMeter], val: list[AverageMeter]) -> None:
        self.train_summaries.append(tuple(float(m.avg) for m in train))
        self.val_acc1.append(float(val[1].avg))
        self.best_acc1 = max(val[1].avg, self.best_acc1)

    def on_train_epoch_start(self) -> None:
        self.meters = meters()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.step(batch, self.meters)

    def on_validation_epoch_start(self) -> None:
        self.val_meters = meters()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.step(batch, self.val_meters)

    def on_validation_epoch_end(self) -> None:
        self.remember(self.meters, self.val_meters)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)]


class Images(Dataset):
    def __init__(self, n: int, seed: int, flip: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x, self.flip = torch.randn(n, 3, 8, 8, generator=g), flip
        self.y = torch.bucketize(self.x[:, 0].mean((1, 2)), torch.linspace(-0.4, 0.4, 9))  # learnable labels

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        flip = self.flip and bool(torch.rand(1) < 0.5)  # RandomHorizontalFlip(p=0.5)
        return (self.x[i].flip(-1) if flip else self.x[i]), self.y[i]


def make_imagenet(workers: int = 0) -> tuple[TinyResNet, DataLoader, DataLoader]:
    import random
    random.seed(0)
    torch.manual_seed(0)
    model = TinyResNet()
    train = DataLoader(Images(28, 3, True), batch_size=8, shuffle=True, num_workers=workers)
    val = DataLoader(Images(12, 4, False), batch_size=8, shuffle=False, num_workers=workers)
    return model, train, val


def original_imagenet(precision: str, workers: int = 0, epochs: int = 3) -> TinyResNet:
    model, train_loader, val_loader = make_imagenet(workers)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    for _ in range(epochs):
        train_meters, val_meters = meters(), meters()
        model.train()
        for batch in train_loader:
            with autocast():
                loss = model.step(batch, train_meters)
            optimizer.zero_grad()
            amp_step(scaler, optimizer, loss)
        model.eval()
        with torch.no_grad():
            for batch in val_loader:
                with autocast():
                    model.step(batch, val_meters)
        scheduler.step()
        model.remember(train_meters, val_meters)
    return model

