"""`trainer.check_resume` on a pipeline that resumes exactly and on three broken ones: it names
the first batch that differs (the first one after the first resume) and the cause, and leaves
the random streams, the user's module and loader, and the disk as they were."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers.pipelines import FIRST_AFTER_RESUME, Net, loader
from trainer import Module, check_resume

QUIET = dict(device="cpu", accumulate_grad_batches=2)


def streams() -> tuple[Any, ...]:
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist()


def test_a_correct_pipeline_is_exact_and_the_check_leaves_everything_as_it_was(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a Trainer's default root_dir would land here
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    model = Net()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    data = loader("correct")
    generator_before = streams()
    report = check_resume(model, data, steps=6, **QUIET)
    assert report.exact, str(report)
    assert "exact" in str(report)
    # two stops inside epoch 1 (6 batches, windows of 2): the first requested inside a window
    assert report.cuts == [(1, 1), (1, 3)]
    assert streams() == generator_before
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())
    assert model.layer.weight.grad is None
    assert os.listdir(tmp_path) == []


def test_objects_among_the_trainer_arguments_start_every_run_as_given():
    """An AMP precision carries its GradScaler: a scale grown by the straight run must not be
    the start of the interrupted one (the check copies the arguments for each run)."""
    from trainer.precision import AMP

    precision = AMP(init_scale=2.0**8, growth_interval=2)
    report = check_resume(Net, loader("correct"), steps=6, precision=precision, gradient_clip_val=0.5, **QUIET)
    assert report.exact, str(report)
    assert precision.scaler is None or precision.scaler.get_scale() == 2.0**8


def test_pythons_global_random_in_getitem_is_exact_with_and_without_workers():
    """The Trainer saves Python's stream at the cut, and DataLoader workers seed it from torch's
    generator, which the Trainer replays: such a dataset resumes exactly (not a broken case)."""
    for workers in (0, 2):
        report = check_resume(Net, loader("global_random", num_workers=workers), steps=6, **QUIET)
        assert report.exact, str(report)


def test_a_sampler_reshuffling_from_pythons_random_on_iter_is_exact():
    """The epoch's iterator is made again, on a resume, from every global stream as it was when
    the epoch's iterator was first made (Python's and NumPy's too), so a sampler that shuffles
    with `random.shuffle` in `__iter__` gives the epoch's order again."""
    for workers in (0, 2):
        report = check_resume(Net, lambda: loader("reshuffle", num_workers=workers), steps=6, **QUIET)
        assert report.exact, str(report)


@pytest.mark.parametrize(("kind", "workers", "cause"), [
    ("distributed_epoch", 0, "a DistributedSampler at the loader's batch_sampler.base"),
    ("own_random", 0, "Data.rng (the loader's dataset)"),
])
def test_a_broken_pipeline_names_the_first_batch_after_the_resume_and_the_cause(kind, workers, cause):
    report = check_resume(Net, lambda: loader(kind, num_workers=workers), steps=6, **QUIET)
    assert not report.exact
    assert report.first_bad_batch == FIRST_AFTER_RESUME
    assert "in the run resumed after interruption 1, its first batch" in report.detail
    assert any(cause in text for text in report.causes), report.causes
    assert f"epoch {FIRST_AFTER_RESUME[0]} batch {FIRST_AFTER_RESUME[1]}" in str(report)


def test_a_distributed_sampler_never_told_its_epoch_resumes_exactly_but_is_noted():
    """Out of the Trainer's reach and never given an epoch, the sampler repeats epoch 0's order:
    exact on resume (the order depends on nothing that changes), and the report says why."""
    from torch.utils.data import DataLoader

    from tests.helpers.pipelines import Buckets, Data

    class NeverTold(Buckets):
        def __iter__(self):
            order = list(self.base)
            return iter([order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)])

    def make() -> DataLoader:
        from torch.utils.data.distributed import DistributedSampler

        data = Data()
        return DataLoader(data, batch_sampler=NeverTold(DistributedSampler(data, num_replicas=1, rank=0), 4))

    report = check_resume(Net, make, steps=9, **QUIET)  # 3 windows per epoch: epochs 0 and 1 whole
    assert report.exact
    assert "nothing calls its set_epoch" in str(report) and "batch_sampler.base" in report.notes[0]


class Drifting(Net):
    """Keeps a step counter as a plain attribute: not in the checkpoint, so the weights after a
    resume differ although every batch is the same."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.calls += 1
        return super().training_step(batch, batch_idx) * (1 + self.calls / 10)


def test_state_outside_the_checkpoint_is_named_by_the_first_tensor_that_differs():
    report = check_resume(Drifting, loader("correct"), steps=6, interrupt_at=[8], **QUIET)
    assert not report.exact and report.first_bad_batch is None
    assert report.first_bad_tensor is not None and report.first_bad_tensor.startswith("weights[")
    assert "attribute of the module that is not a parameter or buffer" in report.causes[0]


class FrozenProjection(Net):
    """A frozen random projection the module's own load_state_dict leaves out: a new process
    would draw another one, so the resume is not exact, even when the check is given an
    instance whose copies all start with the same projection."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(3, 3), requires_grad=False)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x @ self.proj), y)

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        return super().load_state_dict({k: v for k, v in state.items() if k != "proj"}, strict=False)


def test_a_state_dict_entry_the_checkpoint_does_not_restore_shows_even_for_a_module_instance():
    report = check_resume(FrozenProjection(), loader("correct"), steps=6, interrupt_at=[8], **QUIET)
    assert not report.exact and report.first_bad_tensor is not None, str(report)


def test_bad_arguments_are_refused_before_any_training():
    with pytest.raises(ValueError, match="steps=1"):
        check_resume(Net, loader(), steps=1)
    with pytest.raises(ValueError, match=r"interrupt_at=\[30\].*from 1 to 11"):
        check_resume(Net, loader(), steps=6, interrupt_at=[30], **QUIET)
    with pytest.raises(ValueError, match="devices=2.*torchrun"):
        check_resume(Net, loader(), devices=2)
    with pytest.raises(TypeError, match="a Module or a function"):
        check_resume("Net", loader())  # type: ignore[arg-type]
