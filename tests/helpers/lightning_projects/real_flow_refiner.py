"""A flow-matching conformer refiner, from qudianlongqqq/4dadapter
(`etflow/models/flexbond_optimizer.py`, class `FlexBondOptimizerLightningModule`).

Kept as written: `sample_uniform_times` (`reference.new_empty(n).uniform_(t_min, t_max)`, a draw
from torch's generator inside every training and validation step), the `Mapping` batches read
through `_field`, the linear interpolation `x_t = (1 - t) * x_init + t * x_ref` and the velocity
target, the three modes' losses (`cartesian_optimizer`, `flexbond4d_only_optimizer`,
`flexbond4d_hybrid_optimizer`), `self.log_dict(metrics, on_step=stage == "train", on_epoch=True,
batch_size=num_graphs, prog_bar=False, sync_dist=True)` of about twenty `train/...` and `val/...`
names (Python ints turned into tensors with `loss.new_tensor`), `save_hyperparameters()`,
AdamW, `on_train_batch_start` logging the learning rate read through
`self.optimizers(use_pl_optimizer=False)`, and `configure_gradient_clipping` replaced by a
`clip_grad_norm_` of its own whose norm it logs per step.
Substituted: the E(n)-equivariant backbone is a two-layer MLP over atom features, positions and
time; the rotatable-bond machinery (`identify_target_bonds`, `apply_bond_jacobian`,
`solve_q_star_least_squares`) is a fixed random map from per-atom bond coefficients to
velocities and its least-squares inverse, with the same outputs and diagnostics; molecules are
random point clouds of 3 to 6 atoms collated into one graph batch (`batch` index per atom).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from trainer import LightningModule, Trainer, seed_everything

OPTIMIZER_MODES = ("cartesian_optimizer", "flexbond4d_only_optimizer", "flexbond4d_hybrid_optimizer")


def sample_uniform_times(reference: Tensor, num_graphs: int, t_min: float = 0.0, t_max: float = 1.0) -> Tensor:
    if num_graphs < 1:
        raise ValueError("num_graphs must be positive.")
    if not 0.0 <= float(t_min) <= float(t_max) <= 1.0:
        raise ValueError("Require 0 <= t_min <= t_max <= 1.")
    return reference.new_empty(num_graphs).uniform_(float(t_min), float(t_max))


def _field(batch: Any, name: str):
    if isinstance(batch, Mapping):
        return batch[name]
    return getattr(batch, name)


class Backbone(nn.Module):
    """Stand-in for LightEGNNRefinerBackbone: per-atom velocity and bond coefficients."""

    def __init__(self, atom_feature_dim: int, hidden_dim: int, num_bonds: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(atom_feature_dim + 4, hidden_dim), nn.SiLU(), nn.Linear(hidden_dim, 3 + num_bonds))

    def forward(self, node_attr: Tensor, pos: Tensor, atom_time: Tensor) -> tuple[Tensor, Tensor]:
        out = self.net(torch.cat([node_attr, pos, atom_time[:, None]], dim=-1))
        return out[:, :3], out[:, 3:]


class FlexBondOptimizerLightningModule(LightningModule):
    def __init__(self, mode: str = "flexbond4d_hybrid_optimizer", atom_feature_dim: int = 5, hidden_dim: int = 16,
                 num_bonds: int = 2, correction_scale: float = 0.01, q_loss_weight: float = 0.001,
                 corr_reg_weight: float = 0.0001, lr: float = 2.0e-3, weight_decay: float = 1.0e-6,
                 grad_clip: float = 1.0, t_min: float = 0.0, t_max: float = 1.0) -> None:
        super().__init__()
        if mode not in OPTIMIZER_MODES:
            raise ValueError(f"Unknown mode {mode!r}; choose from {OPTIMIZER_MODES}.")
        self.save_hyperparameters()
        self.optimizer_mode = mode
        self.backbone = Backbone(atom_feature_dim, hidden_dim, num_bonds)
        self.register_buffer("bond_map", torch.randn(num_bonds, 3, generator=torch.Generator().manual_seed(0)))

    def _atom_batch(self, batch: Any, num_atoms: int, device) -> Tensor:
        atom_batch = getattr(batch, "batch", None)
        if atom_batch is None and isinstance(batch, Mapping):
            atom_batch = batch.get("batch")
        if atom_batch is None:
            atom_batch = torch.zeros(num_atoms, dtype=torch.long, device=device)
        return atom_batch

    def forward(self, batch: Any, pos: Optional[Tensor] = None, t: Optional[Tensor] = None) -> dict[str, Any]:
        pos = _field(batch, "x_init") if pos is None else pos
        atom_batch = self._atom_batch(batch, pos.size(0), pos.device)
        num_graphs = int(atom_batch.max().item()) + 1 if atom_batch.numel() else 1
        if t is None:
            t = pos.new_zeros((num_graphs,))
        t = torch.as_tensor(t, device=pos.device, dtype=pos.dtype).reshape(-1)
        if t.numel() == 1 and num_graphs > 1:
            t = t.expand(num_graphs)
        atom_time = t[atom_batch]
        v_cart_raw, q_b = self.backbone(_field(batch, "node_attr"), pos, atom_time)
        v_4d = q_b @ self.bond_map
        v_4d = v_4d + 0.0 * v_cart_raw
        zero = torch.zeros_like(pos)
        if self.optimizer_mode == "cartesian_optimizer":
            v_cart, v_4d_used, v_final = v_cart_raw, zero, v_cart_raw
        elif self.optimizer_mode == "flexbond4d_only_optimizer":
            v_cart, v_4d_used, v_final = zero, v_4d, v_4d
        else:
            v_cart, v_4d_used = v_cart_raw, v_4d
            v_final = v_cart + self.hparams.correction_scale * v_4d
        return {"v_cart": v_cart, "q_b": q_b, "v_4d": v_4d_used, "v_final": v_final,
                "num_skipped_by_cap": pos.new_zeros(())}

    def _shared_step(self, batch: Any, stage: str) -> Tensor:
        x_init = _field(batch, "x_init")
        x_ref = _field(batch, "x_ref_aligned")
        atom_batch = self._atom_batch(batch, x_init.size(0), x_init.device)
        num_graphs = int(atom_batch.max().item()) + 1 if atom_batch.numel() else 1
        t = sample_uniform_times(x_init, num_graphs, self.hparams.t_min, self.hparams.t_max)
        atom_t = t[atom_batch, None]
        x_t = (1 - atom_t) * x_init + atom_t * x_ref
        target_velocity = x_ref - x_init
        output = self(batch, x_t, t)
        cart_loss = (output["v_cart"] - target_velocity).square().mean()
        final_loss = (output["v_final"] - target_velocity).square().mean()
        flow_loss = final_loss
        q_loss = final_loss.new_zeros(())
        num_valid_bonds = int(output["q_b"].shape[0])
        if self.optimizer_mode == "flexbond4d_hybrid_optimizer":
            residual = target_velocity - output["v_cart"].detach()
            q_star = residual @ torch.linalg.pinv(self.bond_map)
            q_valid = torch.isfinite(q_star).all(dim=-1)
            if q_valid.any():
                q_loss = (output["q_b"][q_valid] - q_star[q_valid]).square().mean()
            num_valid_bonds = int(q_valid.sum())
        corr_reg_loss = output["v_4d"].square().mean()
        loss = flow_loss
        if self.optimizer_mode == "flexbond4d_only_optimizer":
            loss = loss + self.hparams.corr_reg_weight * corr_reg_loss
        elif self.optimizer_mode == "flexbond4d_hybrid_optimizer":
            loss = loss + self.hparams.q_loss_weight * q_loss + self.hparams.corr_reg_weight * corr_reg_loss
        target_norm = torch.linalg.norm(target_velocity, dim=-1).mean().clamp_min(1e-8)
        residual_norm = torch.linalg.norm(target_velocity - output["v_cart"].detach(), dim=-1).mean().clamp_min(1e-8)
        metrics = {
            f"{stage}/refinement_time_mean": t.mean(),
            f"{stage}/refinement_time_min": t.min(),
            f"{stage}/refinement_time_max": t.max(),
            f"{stage}/flow_matching_loss": flow_loss,
            f"{stage}/cartesian_loss": cart_loss,
            f"{stage}/final_loss": final_loss,
            f"{stage}/loss": loss,
            f"{stage}/cartesian/corr_norm": torch.linalg.norm(output["v_cart"], dim=-1).mean(),
            f"{stage}/cartesian/corr_to_target_ratio": torch.linalg.norm(output["v_cart"], dim=-1).mean() / target_norm,
            f"{stage}/flexbond/q_loss": q_loss,
            f"{stage}/flexbond/corr_reg_loss": corr_reg_loss,
            f"{stage}/target_velocity_norm": target_norm,
            f"{stage}/flexbond/corr_norm": torch.linalg.norm(output["v_4d"], dim=-1).mean(),
            f"{stage}/flexbond/corr_to_residual_ratio": torch.linalg.norm(output["v_4d"], dim=-1).mean() / residual_norm,
            f"{stage}/flexbond/num_valid_bonds": loss.new_tensor(num_valid_bonds),
            f"{stage}/flexbond/num_skipped_by_cap": output["num_skipped_by_cap"].to(device=loss.device, dtype=loss.dtype),
        }
        self.log_dict(metrics, on_step=stage == "train", on_epoch=True, batch_size=num_graphs, prog_bar=False, sync_dist=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers(use_pl_optimizer=False)
        self.log("learning_rate", optimizer.param_groups[0]["lr"], on_step=True, on_epoch=False)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), self.hparams.grad_clip)
        self.log("grad_norm", norm, on_step=True, on_epoch=False)


class Molecules(Dataset):
    def __init__(self, count: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(count):
            atoms = int(torch.randint(3, 7, (1,), generator=g))
            x_ref = torch.randn(atoms, 3, generator=g)
            self.items.append({"node_attr": torch.randn(atoms, 5, generator=g), "x_ref_aligned": x_ref,
                               "x_init": x_ref + 0.5 * torch.randn(atoms, 3, generator=g)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return self.items[index]


def collate(items: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    batch = {key: torch.cat([item[key] for item in items]) for key in items[0]}
    batch["batch"] = torch.cat([torch.full((len(item["x_init"]),), i, dtype=torch.long) for i, item in enumerate(items)])
    return batch


def main(root_dir: str | Path, precision: str = "32-true", mode: str = "flexbond4d_hybrid_optimizer",
         max_epochs: int = 3, log_every_n_steps: int = 2) -> dict[str, Any]:
    seed_everything(21)
    model = FlexBondOptimizerLightningModule(mode=mode)
    trainer = Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=str(root_dir),
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      log_every_n_steps=log_every_n_steps)
    trainer.fit(model, DataLoader(Molecules(20, 1), batch_size=4, shuffle=True, collate_fn=collate),
                DataLoader(Molecules(8, 2), batch_size=4, collate_fn=collate))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics),
            "logged": dict(trainer.logged_metrics)}
