"""pytorch/examples' reinforcement_learning at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_reinforcement_learning.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

CartPole replaced by its own equations in torch (float32 state, a reset generator of its
own like gym's np_random, episodes truncated at MAX_T). One optimizer step per episode
(finish_episode), `for i_episode in count(1)` until the running reward passes the
threshold: in the port an endless iterable of episode numbers and `should_stop`.
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

from tests.helpers.examples import amp_step, autocast_for, scaler_for
from trainer import Module


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
