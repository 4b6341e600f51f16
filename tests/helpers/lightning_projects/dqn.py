"""Lightning's DQN example, small: an agent fills a replay buffer by acting in the
environment inside `training_step`, an IterableDataset samples the buffer, and the target
network is synchronised every `sync_rate` steps. The environment is a deterministic corridor
(no gym): move left or right, reward 1 at the right end, which ends the episode."""

from __future__ import annotations

from collections import deque, namedtuple
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from trainer import LightningModule, Trainer, seed_everything

Experience = namedtuple("Experience", ["state", "action", "reward", "done", "new_state"])


class Corridor:
    """Positions 0..size-1, start in the middle; action 0 moves left, 1 moves right."""

    def __init__(self, size: int = 6) -> None:
        self.size = size
        self.position = size // 2

    def reset(self) -> np.ndarray:
        self.position = self.size // 2
        return self.observe()

    def observe(self) -> np.ndarray:
        state = np.zeros(self.size, dtype=np.float32)
        state[self.position] = 1.0
        return state

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        self.position = max(0, min(self.size - 1, self.position + (1 if action == 1 else -1)))
        done = self.position == self.size - 1
        return self.observe(), (1.0 if done else -0.1), done


class DQN(torch.nn.Module):
    def __init__(self, obs_size: int, n_actions: int, hidden_size: int = 32) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(obs_size, hidden_size), torch.nn.ReLU(), torch.nn.Linear(hidden_size, n_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float())


class ReplayBuffer:
    def __init__(self, capacity: int) -> None:
        self.buffer: deque[Experience] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.buffer)

    def append(self, experience: Experience) -> None:
        self.buffer.append(experience)

    def sample(self, batch_size: int) -> tuple[np.ndarray, ...]:
        indices = np.random.choice(len(self.buffer), batch_size, replace=False)
        states, actions, rewards, dones, next_states = zip(*(self.buffer[idx] for idx in indices))
        return (np.array(states), np.array(actions), np.array(rewards, dtype=np.float32),
                np.array(dones, dtype=bool), np.array(next_states))


class RLDataset(IterableDataset):
    """Each epoch: `sample_size` experiences drawn from the buffer when iteration starts."""

    def __init__(self, buffer: ReplayBuffer, sample_size: int = 64) -> None:
        self.buffer = buffer
        self.sample_size = sample_size

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        states, actions, rewards, dones, new_states = self.buffer.sample(self.sample_size)
        for i in range(len(dones)):
            yield states[i], actions[i], rewards[i], dones[i], new_states[i]


class Agent:
    def __init__(self, env: Corridor, replay_buffer: ReplayBuffer) -> None:
        self.env = env
        self.replay_buffer = replay_buffer
        self.state = self.env.reset()

    def get_action(self, net: torch.nn.Module, epsilon: float) -> int:
        if np.random.random() < epsilon:
            return int(np.random.randint(2))
        q_values = net(torch.tensor(np.array([self.state])))
        return int(torch.argmax(q_values, dim=1).item())

    @torch.no_grad()
    def play_step(self, net: torch.nn.Module, epsilon: float = 0.0) -> tuple[float, bool]:
        action = self.get_action(net, epsilon)
        new_state, reward, done = self.env.step(action)
        self.replay_buffer.append(Experience(self.state, action, reward, done, new_state))
        self.state = self.env.reset() if done else new_state
        return reward, done


class DQNLightning(LightningModule):
    def __init__(self, batch_size: int = 16, lr: float = 1e-2, gamma: float = 0.9, sync_rate: int = 5,
                 replay_size: int = 200, warm_start_steps: int = 64, eps_start: float = 1.0, eps_end: float = 0.05,
                 eps_last_frame: int = 40, sample_size: int = 64) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.env = Corridor()
        self.net = DQN(self.env.size, 2)
        self.target_net = DQN(self.env.size, 2)
        self.buffer = ReplayBuffer(self.hparams.replay_size)
        self.agent = Agent(self.env, self.buffer)
        self.total_reward = 0.0
        self.episode_reward = 0.0
        self.populate(self.hparams.warm_start_steps)

    def populate(self, steps: int) -> None:
        for _ in range(steps):
            self.agent.play_step(self.net, epsilon=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def dqn_mse_loss(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        states, actions, rewards, dones, next_states = batch
        state_action_values = self.net(states).gather(1, actions.long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_state_values = self.target_net(next_states).max(1)[0]
            next_state_values[dones] = 0.0
        expected = next_state_values * self.hparams.gamma + rewards
        return F.mse_loss(state_action_values, expected)

    def get_epsilon(self) -> float:
        fraction = min(1.0, self.global_step / self.hparams.eps_last_frame)
        return self.hparams.eps_start + fraction * (self.hparams.eps_end - self.hparams.eps_start)

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        reward, done = self.agent.play_step(self.net, self.get_epsilon())
        self.episode_reward += reward
        loss = self.dqn_mse_loss(batch)
        if done:
            self.total_reward = self.episode_reward
            self.episode_reward = 0.0
        if self.global_step % self.hparams.sync_rate == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        self.log("total_reward", self.total_reward, prog_bar=True)
        self.log("train_loss", loss)
        self.log("steps", float(self.global_step))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.net.parameters(), lr=self.hparams.lr)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RLDataset(self.buffer, self.hparams.sample_size), batch_size=self.hparams.batch_size)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    seed_everything(11)
    model = DQNLightning()
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=5,
        precision=precision,
        default_root_dir=root_dir,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
