"""BaseFinetuning and BackboneFinetuning as Lightning's own tests specify them
(tests_pytorch/callbacks/test_finetuning_callback.py), each scenario run under Lightning and here,
with only the imports changed, and compared: which parameters are frozen at every epoch start,
the optimizer's parameter groups and their learning rates, the weights, the callback's state in
the checkpoint, and a resume that rebuilds the groups before the optimizer's state is loaded.
Lightning's DeepSpeed refusal has no counterpart here (no DeepSpeed strategy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import warnings
from collections import OrderedDict
import torch
from torch import nn
from torch.utils.data import DataLoader
from trainer import Callback, LightningModule, Trainer
from callbacks import BackboneFinetuning, BaseFinetuning, ModelCheckpoint
from trainer.demos.boring_classes import BoringModel, RandomDataset

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False)


class Record(Callback):
    """At every epoch start (after the finetuning callback): the groups' learning rates and
    sizes, and which parameters train."""

    def __init__(self):
        self.seen = []

    def on_train_epoch_start(self, trainer, module):
        opt = trainer.optimizers[0]
        self.seen.append((trainer.current_epoch, [(g["lr"], len(g["params"])) for g in opt.param_groups],
                          [n for n, p in module.named_parameters() if p.requires_grad],
                          [m.track_running_stats for m in module.modules() if isinstance(m, nn.BatchNorm1d)]))


def weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def groups(optimizer):
    return [{k: v for k, v in g.items() if k != "params"} | {"n": len(g["params"])} for g in optimizer.param_groups]


class BackboneModel(BoringModel):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(32, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU())
        self.layer = nn.Linear(32, 2)

    def forward(self, x):
        return self.layer(self.backbone(x))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.layer.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 16), batch_size=2)


def backbone(root, options=None, epochs=4):
    """Lightning: test_finetuning_callback (the backbone's rate grows, aligned with the head's)."""
    torch.manual_seed(42)
    model, record = BackboneModel(), Record()
    callback = BackboneFinetuning(**(options or dict(unfreeze_backbone_at_epoch=2)))
    ckpt = ModelCheckpoint(dirpath=root, save_last=True)
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=1, max_epochs=epochs,
                      callbacks=[callback, record, ckpt], **QUIET)
    trainer.fit(model)
    saved = torch.load(ckpt.last_model_path, weights_only=False)["callbacks"][callback.state_key]
    saved = {k: saved[k] for k in ("internal_optimizer_metadata", "previous_backbone_lr")}  # Lightning's keys
    return dict(seen=record.seen, weights=weights(model), groups=groups(trainer.optimizers[0]),
                previous=callback.previous_backbone_lr, saved=saved)


class AddTwice(BackboneFinetuning):
    def finetune_function(self, pl_module, epoch, optimizer):
        if epoch == 0:
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, 0.1, train_bn=self.train_bn,
                                              initial_denom_lr=self.initial_denom_lr)


def already_held(root):
    """Lightning: test_finetuning_callback_warning (parameters the optimizer holds are skipped,
    with a warning), then a resume without the callback."""
    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(32, 2, bias=False)
            self.layer = None

        def forward(self, x):
            return self.backbone(x)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(42)
    model = Model()
    model.validation_step = None
    chk = ModelCheckpoint(dirpath=root, save_last=True)
    trainer = Trainer(default_root_dir=root, limit_train_batches=1, max_epochs=2, callbacks=[AddTwice(3), chk], **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    warned = any(issubclass(w.category, UserWarning) and "Did you init your optimizer in" in str(w.message)
                 for w in caught)
    first = groups(trainer.optimizers[0])
    trainer = Trainer(default_root_dir=root, max_epochs=3, limit_train_batches=1, **QUIET)
    trainer.fit(model, ckpt_path=chk.last_model_path)
    return warned, first, groups(trainer.optimizers[0]), trainer.current_epoch, weights(model)


def static_helpers(root):
    """Lightning: test_freeze_unfreeze_function, test_unfreeze_and_add_param_group_function,
    test_complex_nested_model."""
    torch.manual_seed(42)
    out = []

    def state(model):
        return ([p.requires_grad for p in model.parameters()],
                [m.track_running_stats for m in model.modules() if isinstance(m, nn.BatchNorm1d)])

    model = nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
    BaseFinetuning.freeze(model, train_bn=True)
    out.append(state(model))
    BaseFinetuning.freeze(model, train_bn=False)
    out.append(state(model))
    BaseFinetuning.make_trainable(model)
    out.append(state(model))
    BaseFinetuning.freeze(model[0], train_bn=False)
    out.append(state(model))
    BaseFinetuning.freeze([model[1], [model[3]]], train_bn=True)
    out.append(state(model))

    backbone = nn.Sequential(*[nn.Linear(4, 4, bias=False) for _ in range(5)], nn.BatchNorm1d(4))
    optimizer = torch.optim.SGD(backbone[0].parameters(), lr=0.01)
    warned = []
    for call in (lambda: BaseFinetuning.unfreeze_and_add_param_group(backbone[0], optimizer=optimizer),
                 lambda: (setattr(backbone[1].weight, "requires_grad", False),
                          BaseFinetuning.unfreeze_and_add_param_group(backbone[1], optimizer=optimizer)),
                 lambda: BaseFinetuning.unfreeze_and_add_param_group(backbone, optimizer=optimizer, lr=100,
                                                                     train_bn=False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        warned.append([(w.category.__name__, "already exist within another group" in str(w.message)) for w in caught])
    held = [[next(i for i, q in enumerate(backbone.parameters()) if q is p) for p in g["params"]]
            for g in optimizer.param_groups]
    out.append((warned, groups(optimizer), held, state(backbone)))

    class ConvBlock(nn.Module):
        def __init__(self, cin, cout, own=False):
            super().__init__()
            self.module_dict = nn.ModuleDict({"conv": nn.Conv2d(cin, cout, 3), "act": nn.ReLU()})
            if own:
                self.parent_param = nn.Parameter(torch.zeros(1))
            self.bn = nn.BatchNorm2d(cout)

    nested = nn.Sequential(OrderedDict([("encoder", nn.Sequential(ConvBlock(3, 4, own=True), ConvBlock(4, 4))),
                                        ("decoder", ConvBlock(4, 2))]))
    flat = [type(m).__name__ for m in BaseFinetuning.flatten_modules(nested)]
    BaseFinetuning.freeze(nested.encoder, train_bn=True)
    frozen = [p.requires_grad for p in nested.parameters()]
    BaseFinetuning.make_trainable(nested)
    out.append((flat, frozen, len(list(BaseFinetuning.filter_params(nested.encoder, train_bn=True))),
                len(list(BaseFinetuning.filter_params(nested.encoder, train_bn=False)))))
    return out


class LayerByLayer(BaseFinetuning):
    def freeze_before_training(self, pl_module):
        self.freeze(pl_module.layer)

    def finetune_function(self, pl_module, epoch, optimizer):
        self.unfreeze_and_add_param_group(pl_module.layer[epoch + 1], optimizer)


class Stack(BoringModel):
    def __init__(self, n=6):
        super().__init__()
        self.layer = nn.Sequential(*[nn.Linear(32, 32, bias=bool(i % 2)) for i in range(n - 1)], nn.Linear(32, 2))

    def forward(self, x):
        return self.layer(x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer[0].parameters(), lr=0.1)


def metadata(root):
    """Lightning: test_base_finetuning_internal_optimizer_metadata (one group a layer, by name;
    a resume past the last layer fails in finetune_function)."""
    torch.manual_seed(42)
    cb, chk, model = LayerByLayer(), ModelCheckpoint(dirpath=root, save_last=True), Stack()
    trainer = Trainer(default_root_dir=root, max_epochs=5, limit_train_batches=1, limit_val_batches=1,
                      callbacks=[cb, chk], **QUIET)
    trainer.fit(model)
    names = [g["params"] for g in cb._internal_optimizer_metadata[0]]
    cb2 = LayerByLayer()
    trainer = Trainer(default_root_dir=root, max_epochs=10, limit_train_batches=1, limit_val_batches=1,
                      callbacks=[cb2], **QUIET)
    try:
        trainer.fit(Stack(), ckpt_path=chk.last_model_path)
        error = None
    except IndexError as e:
        error = str(e)
    return names, error, [g["params"] for g in cb2._internal_optimizer_metadata[0]], weights(model)


class FromEpochOne(BaseFinetuning):
    def freeze_before_training(self, pl_module):
        self.freeze(pl_module.layer[:3])

    def finetune_function(self, pl_module, epoch, optimizer):
        if epoch >= 1:
            self.unfreeze_and_add_param_group(pl_module.layer[epoch - 1], optimizer)


class Filtered(BoringModel):
    def __init__(self):
        super().__init__()
        self.layer = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 2))

    def configure_optimizers(self):
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1, momentum=0.9)


def restore(root):
    """Lightning: test_callbacks_restore (the groups are rebuilt on resume before the optimizer's
    state is loaded, so a momentum buffer for every group comes back)."""
    torch.manual_seed(42)
    chk, cb, model = ModelCheckpoint(dirpath=root, save_last=True), FromEpochOne(), Filtered()
    kwargs = dict(default_root_dir=root, limit_train_batches=1, limit_val_batches=1, max_epochs=2, **QUIET)
    trainer = Trainer(callbacks=[cb, chk], **kwargs)
    trainer.fit(model)
    meta = cb._internal_optimizer_metadata
    cb2 = FromEpochOne()
    trainer = Trainer(callbacks=[cb2, chk], **dict(kwargs, max_epochs=3))
    trainer.fit(model, ckpt_path=chk.last_model_path)
    opt = trainer.optimizers[0]
    momenta = [opt.state[p]["momentum_buffer"].clone() if "momentum_buffer" in opt.state[p] else None
               for g in opt.param_groups for p in g["params"]]
    return meta, cb2._internal_optimizer_metadata, groups(opt), momenta, weights(model)


class BackboneBoring(BoringModel):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 2)
        self.backbone = nn.Linear(32, 32)

    def forward(self, x):
        return self.layer(self.backbone(x))

    def train_dataloader(self):  # the same data in a resumed run (the random streams are not Lightning's there)
        return DataLoader(RandomDataset(32, 64), batch_size=2) if torch.manual_seed(7) else None


def restore_backbone(root):
    """Lightning: test_callbacks_restore_backbone (a new BackboneFinetuning continues a run)."""
    torch.manual_seed(42)
    ckpt = ModelCheckpoint(dirpath=root, save_last=True)
    kwargs = dict(default_root_dir=root, limit_train_batches=1, limit_val_batches=1, **QUIET)
    Trainer(max_epochs=2, callbacks=[ckpt, BackboneFinetuning(unfreeze_backbone_at_epoch=1)], **kwargs).fit(BackboneBoring())
    model, cb = BackboneBoring(), BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    trainer = Trainer(max_epochs=3, callbacks=cb, **kwargs)
    trainer.fit(model, ckpt_path=ckpt.last_model_path)
    return groups(trainer.optimizers[0]), cb.previous_backbone_lr, weights(model)


def resume_at_epoch_end(root):
    """A resume from an epoch-end checkpoint of ModelCheckpoint (listed after the finetuning
    callback) runs the next epoch's finetuning once: the backbone's rate grows once per epoch."""
    class HeadOnly(BackboneBoring):
        def configure_optimizers(self):
            return torch.optim.SGD(self.layer.parameters(), lr=0.1)

    def run(folder, ckpt_path=None):
        torch.manual_seed(42)
        model, record = HeadOnly(), Record()
        ckpt = ModelCheckpoint(dirpath=folder, save_top_k=-1, filename="{epoch}")
        callback = BackboneFinetuning(unfreeze_backbone_at_epoch=1)
        trainer = Trainer(default_root_dir=folder, max_epochs=4, limit_train_batches=2, limit_val_batches=0,
                          callbacks=[callback, record, ckpt], **QUIET)
        trainer.fit(model, ckpt_path=ckpt_path)
        return record.seen, callback.previous_backbone_lr, callback._internal_optimizer_metadata, weights(model)

    whole = run(root / "whole")
    resumed = run(root / "resumed", ckpt_path=root / "whole" / "epoch=1.ckpt")
    saved = torch.load(root / "whole" / "epoch=1.ckpt", weights_only=False)
    state = next(v for k, v in saved["callbacks"].items() if k.startswith("BackboneFinetuning"))
    return whole, resumed, state["previous_backbone_lr"], [g["lr"] for g in saved["optimizer_states"][0]["param_groups"]]


def no_backbone(root):
    """Lightning: BackboneFinetuning.on_fit_start refuses a module without `backbone`."""
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=0,
                      callbacks=[BackboneFinetuning()], **QUIET)
    try:
        trainer.fit(BoringModel())
    except AttributeError:  # freeze_before_training reads `backbone` in setup, before on_fit_start
        return "AttributeError"
    except Exception as error:
        return "backbone" in str(error)
    return "no error"
'''

SPEC = Spec(SOURCE, "spec_finetuning")


def same(ours: Any, theirs: Any) -> bool:
    """`==` that compares tensors with `torch.equal`, through dicts, lists and tuples."""
    if isinstance(ours, torch.Tensor) or isinstance(theirs, torch.Tensor):
        return isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and torch.equal(ours, theirs)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    return bool(ours == theirs)


@pytest.mark.parametrize("options", [
    dict(unfreeze_backbone_at_epoch=2),
    dict(unfreeze_backbone_at_epoch=1, backbone_initial_lr=0.5, should_align=False, train_bn=False,
         lambda_func=lambda epoch: 1.5),
], ids=["default", "options"])
def test_backbone_finetuning(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("backbone", tmp_path, options=options)
    assert same(ours, theirs), (ours["seen"], theirs["seen"])


@pytest.mark.parametrize("scenario", ["already_held", "static_helpers", "metadata", "restore", "restore_backbone",
                                      "no_backbone"])
def test_finetuning(scenario: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare(scenario, tmp_path)
    if scenario in ("restore", "restore_backbone"):
        # The groups and the metadata are Lightning's. The weights after the resume are not:
        # here what the first run unfroze trains on (test_resume_at_epoch_end).
        keep = 3 if scenario == "restore" else 2
        ours, theirs = ours[:keep], theirs[:keep]
    assert same(ours, theirs), (ours, theirs)


def test_resume_at_epoch_end(tmp_path: Path) -> None:
    """The checkpoint holds the state before the next epoch's finetuning, as Lightning's, and the
    rates go on as in the uninterrupted run. Unlike Lightning's, a resumed run here also trains
    what the interrupted run had unfrozen (Lightning's `setup` freezes the backbone again and
    nothing unfreezes it), so it ends with the uninterrupted run's weights."""
    ours, theirs = SPEC.compare("resume_at_epoch_end", tmp_path)
    (whole, resumed, saved_lr, saved_groups), (their_whole, their_resumed, their_lr, their_groups) = ours, theirs
    assert same(whole, their_whole)
    assert (saved_lr, saved_groups) == (their_lr, their_groups)
    rates = [(epoch, groups) for epoch, groups, _, _ in resumed[0]]
    assert rates == [(epoch, groups) for epoch, groups, _, _ in their_resumed[0]] == [(e, g) for e, g, _, _ in whole[0][2:]]
    assert resumed[0] == whole[0][2:] and same(resumed[1:], whole[1:])
    assert "backbone.weight" not in their_resumed[0][0][2]  # Lightning's resume: the backbone stays frozen
