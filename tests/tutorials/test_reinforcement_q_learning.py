"""intermediate_source/reinforcement_q_learning.py (DQN on CartPole), ported to a `Module`.

The tutorial: a policy and a target `DQN` (three linear layers), `AdamW(lr=LR,
amsgrad=True)`, a `ReplayMemory` sampled with `random.sample`, epsilon-greedy actions
(`random.random()` against a decaying threshold, `env.action_space.sample()` when
exploring); per environment step: act, push the transition, `optimize_model()` (nothing
until the memory holds `BATCH_SIZE` transitions; else the Huber loss of Q(s, a) against
r + GAMMA * max Q_target(s'), `zero_grad`, backward, `clip_grad_value_(..., 100)`, step),
then the soft update of the target network (`TAU`), until `num_episodes` episodes are done.

The port, as a Lightning user writes it: one environment step per `training_step`, which
returns None (no optimizer step) while the memory is too small; `Trainer(gradient_clip_val=100,
gradient_clip_algorithm="value")` for the clipping; the soft update in `on_train_batch_end`
(after the optimizer step, and also after a skipped one, as the tutorial updates every
step); an endless loader of step numbers and `trainer.should_stop` after the last episode.
Both end on the same policy and target weights (`torch.equal`) and episode durations.

Differences from the tutorial, for speed and with no gym: CartPole is
tests/helpers/examples/reinforcement_learning.py's equations in torch (episodes truncated at
20 steps) with gymnasium's interface and an action space sampled from its own seeded numpy
generator; hidden 32 instead of 128, `BATCH_SIZE` 16 instead of 128, `EPS_DECAY` 50, and
8 episodes instead of 600.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque, namedtuple
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, IterableDataset

from tests.examples.conftest import one_thread  # noqa: F401  (a step per op: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.examples.reinforcement_learning import CartPole
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
BATCH_SIZE, GAMMA, EPS_START, EPS_END, EPS_DECAY, TAU, LR = 16, 0.99, 0.9, 0.05, 50, 0.005, 1e-4
NUM_EPISODES, HIDDEN = 8, 32
Transition = namedtuple('Transition', ('state', 'action', 'next_state', 'reward'))


class ActionSpace:
    def __init__(self) -> None:
        self.n, self.np_random = 2, np.random.default_rng(0)

    def sample(self) -> int:
        return int(self.np_random.integers(self.n))


class Env(CartPole):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = ActionSpace()

    def reset(self, seed: int | None = None) -> Any:
        state, info = super().reset(seed)
        return state.numpy(), info

    def step(self, action: int) -> Any:
        state, *rest = super().step(action)
        return (state.numpy(), *rest)


class ReplayMemory:
    def __init__(self, capacity: int) -> None:
        self.memory: deque[Transition] = deque([], maxlen=capacity)

    def push(self, *args: Any) -> None:
        self.memory.append(Transition(*args))

    def sample(self, batch_size: int) -> list[Transition]:
        return random.sample(self.memory, batch_size)

    def __len__(self) -> int:
        return len(self.memory)


class DQN(nn.Module):
    def __init__(self, n_observations: int, n_actions: int) -> None:
        super().__init__()
        self.layer1 = nn.Linear(n_observations, HIDDEN)
        self.layer2 = nn.Linear(HIDDEN, HIDDEN)
        self.layer3 = nn.Linear(HIDDEN, n_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)


class Agent(Module):
    """The tutorial's globals (nets, memory, `steps_done`, durations) and functions, on one object:
    the original loop drives them by hand, the port through the Trainer."""

    def __init__(self) -> None:
        super().__init__()
        self.env = Env()
        state, info = self.env.reset(seed=0)
        self.policy_net = DQN(len(state), self.env.action_space.n)
        self.target_net = DQN(len(state), self.env.action_space.n)
        self.target_net.load_state_dict(self.policy_net.state_dict())
        self.memory, self.steps_done, self.episode_durations = ReplayMemory(10000), 0, []  # type: ignore[var-annotated]

    def select_action(self, state: torch.Tensor) -> torch.Tensor:
        sample = random.random()
        eps_threshold = EPS_END + (EPS_START - EPS_END) * math.exp(-1. * self.steps_done / EPS_DECAY)
        self.steps_done += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return self.policy_net(state).max(1).indices.view(1, 1)
        return torch.tensor([[self.env.action_space.sample()]], dtype=torch.long)

    def reset(self) -> None:
        state, info = self.env.reset()
        self.state = torch.tensor(state, dtype=torch.float32).unsqueeze(0)

    def act(self) -> bool:
        """One environment step and its transition pushed; whether the episode is done."""
        action = self.select_action(self.state)
        observation, reward, terminated, truncated, _ = self.env.step(action.item())
        reward = torch.tensor([reward])
        next_state = None if terminated else torch.tensor(observation, dtype=torch.float32).unsqueeze(0)
        self.memory.push(self.state, action, next_state, reward)
        self.state = next_state  # type: ignore[assignment]
        return terminated or truncated

    def loss(self) -> torch.Tensor:
        """`optimize_model()` up to its `zero_grad`."""
        transitions = self.memory.sample(BATCH_SIZE)
        batch = Transition(*zip(*transitions))
        non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)), dtype=torch.bool)
        non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
        state_batch = torch.cat(batch.state)
        action_batch = torch.cat(batch.action)
        reward_batch = torch.cat(batch.reward)
        state_action_values = self.policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(BATCH_SIZE)
        with torch.no_grad():
            next_state_values[non_final_mask] = self.target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * GAMMA) + reward_batch
        criterion = nn.SmoothL1Loss()
        return criterion(state_action_values, expected_state_action_values.unsqueeze(1))

    def soft_update(self) -> None:
        """θ′ ← τ θ + (1 −τ )θ′"""
        target_net_state_dict = self.target_net.state_dict()
        policy_net_state_dict = self.policy_net.state_dict()
        for key in policy_net_state_dict:
            target_net_state_dict[key] = policy_net_state_dict[key] * TAU + target_net_state_dict[key] * (1 - TAU)
        self.target_net.load_state_dict(target_net_state_dict)

    # the port
    def on_train_start(self) -> None:
        self.reset()
        self.t = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        self.done = self.act()
        if len(self.memory) < BATCH_SIZE:
            return None  # optimize_model() returns before optimizing: no optimizer step
        return self.loss()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.soft_update()
        if not self.done:
            self.t += 1
            return
        self.episode_durations.append(self.t + 1)
        if len(self.episode_durations) == NUM_EPISODES:
            self.trainer.should_stop = True
        else:
            self.reset()
            self.t = 0

    def configure_optimizers(self) -> Any:
        return optim.AdamW(self.policy_net.parameters(), lr=LR, amsgrad=True)


class Steps(IterableDataset):
    def __iter__(self) -> Iterator[int]:
        return itertools.count()


def original(num_episodes: int = NUM_EPISODES) -> Agent:
    random.seed(0)
    torch.manual_seed(0)
    agent = Agent()
    optimizer = optim.AdamW(agent.policy_net.parameters(), lr=LR, amsgrad=True)
    for i_episode in range(num_episodes):
        agent.reset()
        for t in itertools.count():
            done = agent.act()
            if len(agent.memory) >= BATCH_SIZE:  # optimize_model()
                loss = agent.loss()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_value_(agent.policy_net.parameters(), 100)
                optimizer.step()
            agent.soft_update()
            if done:
                agent.episode_durations.append(t + 1)
                break
    return agent


def ported() -> tuple[Agent, Trainer]:
    random.seed(0)
    torch.manual_seed(0)
    agent = Agent()
    trainer = Trainer(max_epochs=1, gradient_clip_val=100, gradient_clip_algorithm="value", **QUIET)
    trainer.fit(agent, DataLoader(Steps(), batch_size=None))
    return agent, trainer


def test_the_port_trains_to_the_tutorials_policy_and_target_networks() -> None:
    agent, trainer = ported()
    reference = original()
    assert_same_weights(agent, reference)  # policy_net and target_net
    assert agent.episode_durations == reference.episode_durations
    assert len(agent.episode_durations) == NUM_EPISODES
    steps = sum(agent.episode_durations)
    assert trainer.global_step == steps  # a skipped step counts in global_step, as in Lightning
    adamw_steps = trainer.optimizers[0].state[agent.policy_net.layer1.weight]["step"]
    assert adamw_steps == steps - (BATCH_SIZE - 1)  # but no optimizer step until the memory is full


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported()[0], original(NUM_EPISODES - 1))
