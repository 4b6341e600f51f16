"""A third set of pytorch/examples ported to a `Module`, each compared with its original loop.

tests/helpers/ports3.py writes gat, reinforcement_learning and imagenet twice (the script's own
loop and a port); super_resolution, mnist (--dry-run, its accelerator loader settings) and
distributed/minGPT-ddp's trainer are written here. Weights are compared with `torch.equal`,
the numbers the scripts print with `==`. QUIET as in tests/test_script_parity2.py: no sanity
check (the scripts have none), nothing written, validation drawing from the random streams.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split
from torch.utils.data.distributed import DistributedSampler

from tests.helpers import ports3
from tests.helpers.ports import autocast_for, scaler_for
from tests.helpers.reference import assert_same_weights
from tests.test_script_parity import MnistNet, mnist_data
from trainer import Module, Trainer

QUIET: dict[str, Any] = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu",
                             num_sanity_val_steps=0, enable_model_summary=False)
PRECISIONS = ["fp32", "amp", "bf16"]


# ------------------------------------------------------------------------------------ gat
# The whole graph as one batch (a list holding it: the script has no loader); validation each
# epoch on the train and validation nodes, `trainer.test` on the test nodes after fit.
# --dry-run (one epoch) is max_epochs=1; --concat-heads concatenates the first layer's heads.
@pytest.mark.parametrize(("precision", "epochs", "concat"),
                         [(p, 5, False) for p in PRECISIONS] + [("fp32", 1, False), ("fp32", 3, True)])
def test_gat(precision: str, epochs: int, concat: bool) -> None:
    model, batch = ports3.make_gat(concat)
    trainer = Trainer(precision=precision, max_epochs=epochs, **QUIET)
    trainer.fit(model, [batch], [batch])
    trainer.test(model, [batch], verbose=False)
    reference = ports3.original_gat(precision, epochs, concat)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == epochs
    assert model.test_result == reference.test_result


# ------------------------------------------------------------------------ super_resolution
# Conv layers with orthogonal init and a PixelShuffle, MSELoss, Adam(lr=0.01), a shuffled
# training loader, an unshuffled test loader; test() computes the mean PSNR under no_grad
# and never calls model.eval() (nor model.train()); the epoch loss is printed as a mean.
class SuperResolutionNet(Module):
    def __init__(self, upscale_factor: int = 2, width: int = 8) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, width, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(width, width, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(width, width // 2, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(width // 2, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        for conv in (self.conv1, self.conv2, self.conv3):
            nn.init.orthogonal_(conv.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv4.weight)
        self.criterion = nn.MSELoss()
        self.epoch_losses: list[float] = []
        self.psnrs: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv3(self.relu(self.conv2(self.relu(self.conv1(x))))))
        return self.pixel_shuffle(self.conv4(x))

    def on_train_epoch_start(self) -> None:
        self.epoch_loss = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.criterion(self(batch[0]), batch[1])
        self.epoch_loss += loss.item()
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_losses.append(self.epoch_loss / len(self.trainer.train_dataloader))

    def on_validation_epoch_start(self) -> None:
        self.avg_psnr = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.avg_psnr += 10 * math.log10(1 / self.criterion(self(batch[0]), batch[1]).item())

    def on_validation_epoch_end(self) -> None:
        self.psnrs.append(self.avg_psnr / len(self.trainer.val_dataloaders))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def make_super_resolution(threads: int = 0) -> tuple[SuperResolutionNet, DataLoader, DataLoader]:
    def images(n: int, seed: int) -> TensorDataset:  # the target, and its 2x downscaled input
        target = torch.rand(n, 1, 12, 12, generator=torch.Generator().manual_seed(seed))
        return TensorDataset(F.avg_pool2d(target, 2), target)

    torch.manual_seed(123)
    train = DataLoader(images(16, 1), num_workers=threads, batch_size=4, shuffle=True)
    test = DataLoader(images(6, 2), num_workers=threads, batch_size=3, shuffle=False)
    return SuperResolutionNet(), train, test


def original_super_resolution(precision: str, epochs: int = 2, threads: int = 0) -> SuperResolutionNet:
    model, training_data_loader, testing_data_loader = make_super_resolution(threads)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        epoch_loss = 0.0
        for input, target in training_data_loader:
            optimizer.zero_grad()
            with autocast():
                loss = model.criterion(model(input), target)
            epoch_loss += loss.item()
            ports3.amp_step(scaler, optimizer, loss)
        model.epoch_losses.append(epoch_loss / len(training_data_loader))
        avg_psnr = 0.0
        with torch.no_grad():
            for input, target in testing_data_loader:
                with autocast():
                    mse = model.criterion(model(input), target)
                avg_psnr += 10 * math.log10(1 / mse.item())
        model.psnrs.append(avg_psnr / len(testing_data_loader))
    return model


@pytest.mark.parametrize(("precision", "threads"), [(p, 0) for p in PRECISIONS] + [("bf16", 2)])
def test_super_resolution(precision: str, threads: int) -> None:
    model, train_loader, test_loader = make_super_resolution(threads)  # --threads: the loaders' workers
    Trainer(precision=precision, max_epochs=2, **QUIET).fit(model, train_loader, test_loader)
    reference = original_super_resolution(precision, threads=threads)
    assert_same_weights(model, reference)
    assert model.psnrs == reference.psnrs and len(model.psnrs) == 2
    assert model.epoch_losses == reference.epoch_losses


def test_the_comparison_can_fail() -> None:
    """The super-resolution port without its test loader ends elsewhere: iterating the test
    loader draws a base seed, and the next epoch's shuffle follows from it."""
    model, train_loader, _ = make_super_resolution()
    Trainer(max_epochs=2, **QUIET).fit(model, train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_super_resolution("fp32"))


# ------------------------------------------------------------- reinforcement_learning
# One episode per batch from an endless iterable (no len()); each episode's rollout runs in
# training_step, under the precision's autocast as in the amp/bf16 originals; "Solved" is
# `trainer.should_stop = True`, which stops after that episode's step.
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", ["reinforce", "actor_critic"])
def test_reinforcement_learning(kind: str, precision: str) -> None:
    model = ports3.make_agent(kind)
    trainer = Trainer(precision=precision, max_epochs=1, **QUIET)
    trainer.fit(model, ports3.episodes())
    reference = ports3.original_agent(kind, precision)
    assert_same_weights(model, reference)
    assert model.ep_rewards == reference.ep_rewards and model.running_reward == reference.running_reward
    assert reference.solved() and len(reference.ep_rewards) < ports3.EPISODE_CAP  # the stop criterion ended both
    assert trainer.global_step == len(model.ep_rewards)


# ------------------------------------------------------------------------------- imagenet
# StepLR is an epoch-interval scheduler: it steps after validation, as the script's does.
# workers=2: the random flips are drawn in worker processes seeded from the loader's base seed.
@pytest.mark.parametrize(("precision", "workers"), [(p, 0) for p in PRECISIONS] + [("fp32", 2)])
def test_imagenet(precision: str, workers: int) -> None:
    model, train_loader, val_loader = ports3.make_imagenet(workers)
    trainer = Trainer(precision=precision, max_epochs=3, **QUIET)
    trainer.fit(model, train_loader, val_loader)
    reference = ports3.original_imagenet(precision, workers)
    assert_same_weights(model, reference)  # BatchNorm's running statistics included
    assert model.train_summaries == reference.train_summaries and len(model.train_summaries) == 3
    assert model.val_acc1 == reference.val_acc1 and float(model.best_acc1) == float(reference.best_acc1)
    assert len(set(reference.val_acc1)) > 1  # the numbers move: a comparison that could fail
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == [0.1 * 0.1]


@pytest.mark.parametrize(("precision", "workers"), [("fp32", 0), ("amp", 2)])
def test_imagenet_resume(tmp_path: Any, precision: str, workers: int) -> None:
    """The script's --resume, from the Trainer's own checkpoint after epoch 1 and in a fresh
    model, loaders and random state: the uninterrupted script's weights."""
    options = dict(QUIET, enable_checkpointing=True, root_dir=str(tmp_path), run_name="run")
    Trainer(precision=precision, max_epochs=1, **options).fit(*ports3.make_imagenet(workers))
    model, train_loader, val_loader = ports3.make_imagenet(workers)
    torch.manual_seed(12345)
    Trainer(precision=precision, max_epochs=3, **options).fit(model, train_loader, val_loader, ckpt_path="last")
    reference = ports3.original_imagenet(precision, workers)
    assert_same_weights(model, reference)
    assert model.val_acc1 == reference.val_acc1[1:]


# ------------------------------------------------------------------------ mnist --dry-run
# The mnist script as it is now: its loss is printed every `log_interval` batches, where
# --dry-run breaks (so after the first batch of every epoch); the test pass always runs in
# full. On an accelerator both loaders get num_workers=1, persistent_workers=True and
# shuffle=True (pin_memory left out: no accelerator here). The net is test_script_parity's.
LOG_INTERVAL = 3


def make_mnist(accel: bool) -> tuple[Module, DataLoader, DataLoader]:
    class Net(MnistNet):
        def __init__(self) -> None:
            super().__init__()
            self.train_losses: list[float] = []
            self.results: list[tuple[float, int]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self.loss(batch)
            if batch_idx % LOG_INTERVAL == 0:
                self.train_losses.append(loss.item())
            return loss

        def on_validation_epoch_start(self) -> None:
            self.test_loss, self.correct = 0.0, 0

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.test_batch(batch)

        def test_batch(self, batch: Any) -> None:
            data, target = batch
            output = self(data)
            self.test_loss += F.nll_loss(output, target, reduction="sum").item()
            self.correct += output.argmax(dim=1, keepdim=True).eq(target.view(-1, 1)).sum().item()

        def on_validation_epoch_end(self) -> None:
            self.results.append((self.test_loss / len(self.trainer.val_dataloaders.dataset), self.correct))

    torch.manual_seed(1)
    train, test = mnist_data()
    if accel:
        kwargs = dict(num_workers=1, persistent_workers=True, shuffle=True)
        train = DataLoader(train.dataset, batch_size=8, **kwargs)
        test = DataLoader(test.dataset, batch_size=10, **kwargs)
    return Net(), train, test


def original_mnist(precision: str, dry_run: bool, accel: bool, epochs: int = 2) -> Any:
    model, train_loader, test_loader = make_mnist(accel)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer, scheduler = model.configure_optimizers()
    for _ in range(epochs):
        model.train()
        for batch_idx, batch in enumerate(train_loader):
            optimizer.zero_grad()
            with autocast():
                loss = model.loss(batch)
            ports3.amp_step(scaler, optimizer, loss)
            if batch_idx % LOG_INTERVAL == 0:
                model.train_losses.append(loss.item())
                if dry_run:
                    break
        model.eval()
        model.on_validation_epoch_start()
        with torch.no_grad():
            for batch in test_loader:
                with autocast():
                    model.test_batch(batch)
        model.results.append((model.test_loss / len(test_loader.dataset), model.correct))
        scheduler.step()
    return model


# --dry-run's `break` after the first batch of each epoch is `limit_train_batches=1`.
@pytest.mark.parametrize(("precision", "dry_run", "accel"),
                         [(p, d, False) for p in PRECISIONS for d in (False, True)]
                         + [("fp32", False, True), ("amp", True, True)])
def test_mnist(precision: str, dry_run: bool, accel: bool) -> None:
    model, train_loader, test_loader = make_mnist(accel)
    limits = dict(limit_train_batches=1) if dry_run else {}
    Trainer(precision=precision, max_epochs=2, **limits, **QUIET).fit(model, train_loader, test_loader)
    reference = original_mnist(precision, dry_run, accel)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 2
    assert model.train_losses == reference.train_losses and len(model.train_losses) == (2 if dry_run else 6)


def test_mnist_accel_loaders_with_the_default_sanity_check() -> None:
    """docs/design.md ("Decisions"): a validation loader with persistent workers keeps the iterator the
    sanity check opened (as in Lightning), so its first real validation draws no seed where the
    script's first test pass draws one: the default sanity check ends elsewhere, and
    num_sanity_val_steps=0 (the port above) gives the script's weights."""
    model, train_loader, test_loader = make_mnist(accel=True)
    Trainer(max_epochs=2, **{**QUIET, "num_sanity_val_steps": 2}).fit(model, train_loader, test_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_mnist("fp32", False, True))


# ---------------------------------------------------------------- distributed/minGPT-ddp
# minGPT (nn.MultiheadAttention with the script's float `attn_mask`, GELU MLP, dropout 0.1),
# AdamW(betas=(0.9, 0.95)) over decay/no-decay groups in sorted name order, clip_grad_norm_
# at 1.0 before each step, a DistributedSampler (one replica here) told `set_epoch(epoch)`
# with the 1-based epoch; the eval pass never calls model.eval() (dropout stays on) and runs
# under set_grad_enabled(False). Under use_amp the script clips the *scaled* gradients (no
# unscale_): an automatic port, which unscales before clipping, ends elsewhere; a
# manual-optimization port clips as the script does. The port calls set_epoch itself in
# on_train_epoch_start, after the Trainer's own call (the script's epochs count from 1).
V, BLOCK, EMBD = 8, 6, 16


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.resid_drop, self.c_proj = nn.Dropout(0.1), nn.Linear(EMBD, EMBD)
        self.register_buffer("mask", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))
        self.attn = nn.MultiheadAttention(embed_dim=EMBD, num_heads=2, dropout=0.1, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_size = x.size(1)
        return self.resid_drop(self.c_proj(self.attn(x, x, x, attn_mask=self.mask[0, 0, :seq_size, :seq_size])[0]))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2, self.attn = nn.LayerNorm(EMBD), nn.LayerNorm(EMBD), Attention()
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(V, EMBD), nn.Parameter(torch.zeros(1, BLOCK, EMBD))
        self.drop, self.blocks = nn.Dropout(0.1), nn.Sequential(Block())
        self.ln_f, self.head = nn.LayerNorm(EMBD), nn.Linear(EMBD, V, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.data.zero_()
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                p.data.normal_(mean=0.0, std=0.02 / math.sqrt(2))
        self.train_losses: list[float] = []
        self.eval_losses: list[float] = []

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :idx.size(1), :])
        logits = self.head(self.ln_f(self.blocks(x)))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def on_train_epoch_start(self) -> None:
        self.trainer.train_dataloader.sampler.set_epoch(self.current_epoch + 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        _, loss = self(*batch)
        self.train_losses.append(loss.item())
        return loss

    def on_validation_model_eval(self) -> None:
        pass  # the script evaluates in training mode

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.eval_losses.append(self(*batch)[1].item())

    def configure_optimizers(self) -> Any:
        decay, no_decay = set(), set()
        for mn, m in self.named_modules():
            for pn, _ in m.named_parameters():
                fpn = f"{mn}.{pn}" if mn else pn
                blacklisted = pn.endswith("weight") and isinstance(m, (nn.LayerNorm, nn.Embedding))
                if pn.endswith("bias") or pn.endswith("pos_emb") or blacklisted:
                    no_decay.add(fpn)
                elif pn.endswith("in_proj_weight") or (pn.endswith("weight") and isinstance(m, nn.Linear)):
                    decay.add(fpn)
        params = dict(self.named_parameters())
        assert not decay & no_decay and params.keys() == decay | no_decay
        groups = [{"params": [params[pn] for pn in sorted(decay)], "weight_decay": 0.1},
                  {"params": [params[pn] for pn in sorted(no_decay)], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95))


class GPTManual(GPT):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:  # _run_batch(train=True)
        opt = self.optimizers()
        _, loss = self(*batch)
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)  # scaled gradients under amp, as the script
        opt.step()
        self.train_losses.append(loss.item())


class CharDataset(Dataset):
    def __init__(self, data: str) -> None:
        self.stoi = {ch: i for i, ch in enumerate(sorted(set(data)))}
        self.data = data

    def __len__(self) -> int:
        return len(self.data) - BLOCK

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        dix = [self.stoi[s] for s in self.data[idx:idx + BLOCK + 1]]
        return torch.tensor(dix[:-1], dtype=torch.long), torch.tensor(dix[1:], dtype=torch.long)


def make_gpt(cls: type[GPT] = GPT) -> tuple[GPT, DataLoader, DataLoader]:
    text = "".join("abcdefgh"[i] for i in torch.randint(0, V, (62,), generator=torch.Generator().manual_seed(8)))
    torch.manual_seed(0)  # the script never seeds (random_split draws from torch's generator)
    dataset = CharDataset(text)
    train_set, test_set = random_split(dataset, [int(len(dataset) * 0.8), len(dataset) - int(len(dataset) * 0.8)])
    loaders = [DataLoader(d, batch_size=8, shuffle=False, sampler=DistributedSampler(d, num_replicas=1, rank=0))
               for d in (train_set, test_set)]
    return cls(), loaders[0], loaders[1]


def original_gpt(precision: str, epochs: int = 2) -> GPT:
    model, train_loader, test_loader = make_gpt()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = model.configure_optimizers()
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch + 1)
        for source, targets in train_loader:
            with torch.set_grad_enabled(True), autocast():
                _, loss = model(source, targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            model.train_losses.append(loss.item())
        for source, targets in test_loader:
            with torch.set_grad_enabled(False), autocast():
                model.eval_losses.append(model(source, targets)[1].item())
    return model


@pytest.mark.parametrize(("precision", "manual"), [("fp32", False), ("bf16", False), ("fp32", True), ("amp", True)])
def test_mingpt(precision: str, manual: bool) -> None:
    model, train_loader, test_loader = make_gpt(GPTManual if manual else GPT)
    clip = {} if manual else dict(gradient_clip_val=1.0)
    Trainer(precision=precision, max_epochs=2, **clip, **QUIET).fit(model, train_loader, test_loader)
    reference = original_gpt(precision)
    assert_same_weights(model, reference)
    assert model.train_losses == reference.train_losses and len(model.train_losses) == 12
    assert model.eval_losses == reference.eval_losses and len(model.eval_losses) == 4


def test_mingpt_amp_with_the_trainers_clipping_is_not_the_script() -> None:
    """Under amp the script clips the scaled gradients; `gradient_clip_val` clips unscaled ones."""
    model, train_loader, test_loader = make_gpt()
    Trainer(precision="amp", max_epochs=2, gradient_clip_val=1.0, **QUIET).fit(model, train_loader, test_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_gpt("amp"))
