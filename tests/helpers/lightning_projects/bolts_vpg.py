"""Lightning Bolts' `VanillaPolicyGradient` (pl_bolts/models/rl/vanilla_policy_gradient_model.py,
with its `MLP`, `PolicyAgent` and `ExperienceSourceDataset`), copied as written (docstrings
left out): the episodes are played inside the loader's `IterableDataset`, by the policy
network being trained, and the loss is REINFORCE's with an entropy bonus.

Substituted: gym's CartPole by a deterministic corridor with gym's old 4-tuple `step` API
and `observation_space.shape`/`action_space.n` (the agent samples actions with
`np.random.choice`, seeded by `seed_everything`). What Lightning 2.6 refuses was left alone
(nothing: bolts' dict with `"log"`/`"progress_bar"` entries is still a valid return).
Shrunk: hidden size 16, batch size 4, `max_steps` optimizer steps. The loader has no length,
so each framework reads batches at its own time (a deliberate difference): the test accounts for it."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, List, Tuple

import numpy as np
import torch
from torch import Tensor, nn, optim
from torch.nn.functional import log_softmax, softmax
from torch.optim.optimizer import Optimizer
from torch.utils.data import DataLoader, IterableDataset

from trainer import LightningModule, Trainer, seed_everything


class Corridor:
    """Positions 0..5, start at 2; action 1 moves right, 0 left; reward 1 at the right end (done)."""

    observation_space = SimpleNamespace(shape=(6,))
    action_space = SimpleNamespace(n=2)

    def __init__(self) -> None:
        self.position = 2

    def _observe(self) -> np.ndarray:
        state = np.zeros(6, dtype=np.float32)
        state[self.position] = 1.0
        return state

    def reset(self) -> np.ndarray:
        self.position = 2
        return self._observe()

    def step(self, action: int) -> Tuple[np.ndarray, float, bool, dict]:
        self.position = max(0, min(5, self.position + (1 if action == 1 else -1)))
        done = self.position == 5
        return self._observe(), (1.0 if done else -0.1), done, {}


class MLP(nn.Module):
    def __init__(self, input_shape: Tuple[int], n_actions: int, hidden_size: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(input_shape[0], hidden_size), nn.ReLU(), nn.Linear(hidden_size, n_actions))

    def forward(self, input_x):  # type: ignore[no-untyped-def]
        return self.net(input_x.float())


class PolicyAgent:
    def __init__(self, net: nn.Module) -> None:
        self.net = net

    @torch.no_grad()
    def __call__(self, states: Tensor, device: str) -> List[int]:
        if not isinstance(states, list):
            states = [states]
        states = torch.tensor(np.array(states), device=device)  # bolts: torch.tensor(states) (a list of arrays: slow, warns)
        probabilities = softmax(self.net(states), dim=-1).squeeze(dim=-1)  # bolts: F.softmax(...) without dim (deprecated)
        prob_np = probabilities.data.cpu().numpy()
        return [np.random.choice(len(prob), p=prob) for prob in prob_np]


class ExperienceSourceDataset(IterableDataset):
    def __init__(self, generate_batch: Callable) -> None:
        self.generate_batch = generate_batch

    def __iter__(self) -> Iterator:
        return self.generate_batch()


class VanillaPolicyGradient(LightningModule):
    def __init__(self, env: str, gamma: float = 0.99, lr: float = 0.01, batch_size: int = 8, n_steps: int = 10,
                 avg_reward_len: int = 100, entropy_beta: float = 0.01, epoch_len: int = 1000, hidden_size: int = 16, **kwargs: Any) -> None:
        super().__init__()
        self.lr = lr
        self.batch_size = batch_size
        self.batches_per_epoch = self.batch_size * epoch_len
        self.entropy_beta = entropy_beta
        self.gamma = gamma
        self.n_steps = n_steps
        self.save_hyperparameters()
        self.env = Corridor()  # bolts: gym.make(env)
        self.net = MLP(self.env.observation_space.shape, self.env.action_space.n, hidden_size)
        self.agent = PolicyAgent(self.net)
        self.total_rewards: List[float] = []
        self.episode_rewards: List[float] = []
        self.done_episodes = 0
        self.avg_rewards = 0.0
        self.avg_reward_len = avg_reward_len
        self.eps = np.finfo(np.float32).eps.item()
        self.batch_states: List[Any] = []
        self.batch_actions: List[Any] = []
        self.state = self.env.reset()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def train_batch(self) -> Iterator[Tuple[Any, Any, Any]]:
        while True:
            action = self.agent(self.state, self.device)
            next_state, reward, done, _ = self.env.step(action[0])
            self.episode_rewards.append(reward)
            self.batch_actions.append(action)
            self.batch_states.append(self.state)
            self.state = next_state
            if done:
                self.done_episodes += 1
                self.state = self.env.reset()
                self.total_rewards.append(sum(self.episode_rewards))
                self.avg_rewards = float(np.mean(self.total_rewards[-self.avg_reward_len :]))
                returns = self.compute_returns(self.episode_rewards)
                for idx in range(len(self.batch_actions)):
                    yield self.batch_states[idx], self.batch_actions[idx], returns[idx]
                self.batch_states = []
                self.batch_actions = []
                self.episode_rewards = []

    def compute_returns(self, rewards):  # type: ignore[no-untyped-def]
        reward = 0
        returns = []
        for r in rewards[::-1]:
            reward = r + self.gamma * reward
            returns.insert(0, reward)
        returns = torch.tensor(returns)
        return (returns - returns.mean()) / (returns.std() + self.eps)

    def loss(self, states, actions, scaled_rewards) -> Tensor:  # type: ignore[no-untyped-def]
        logits = self.net(states)
        log_prob = log_softmax(logits, dim=1)
        log_prob_actions = scaled_rewards * log_prob[range(self.batch_size), actions[0]]
        policy_loss = -log_prob_actions.mean()
        prob = softmax(logits, dim=1)
        entropy = -(prob * log_prob).sum(dim=1).mean()
        entropy_loss = -self.entropy_beta * entropy
        return policy_loss + entropy_loss

    def training_step(self, batch: Tuple[Tensor, Tensor], _: int) -> OrderedDict:
        states, actions, scaled_rewards = batch
        loss = self.loss(states, actions, scaled_rewards)
        log = {"episodes": self.done_episodes, "reward": self.total_rewards[-1], "avg_reward": self.avg_rewards}
        return OrderedDict({"loss": loss, "avg_reward": self.avg_rewards, "log": log, "progress_bar": log})

    def configure_optimizers(self) -> List[Optimizer]:
        optimizer = optim.Adam(self.net.parameters(), lr=self.lr)
        return [optimizer]

    def _dataloader(self) -> DataLoader:
        dataset = ExperienceSourceDataset(self.train_batch)
        return DataLoader(dataset=dataset, batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._dataloader()


def main(root_dir: str | Path, precision: str = "32-true", max_steps: int = 6, **options: Any) -> dict[str, Any]:
    seed_everything(5)
    model = VanillaPolicyGradient("Corridor", batch_size=4, lr=0.05)
    trainer = Trainer(default_root_dir=root_dir, accelerator="cpu", precision=precision, max_steps=max_steps, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, **options)
    trainer.fit(model)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "episodes": model.done_episodes,
            "rewards": list(model.total_rewards)}
