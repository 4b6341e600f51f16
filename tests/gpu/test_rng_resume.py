"""A checkpoint holding two CUDA RNG states (written before on a machine with two GPUs: one
state per visible device) resumes on a machine with one, and restores the state of the device
the run computes on: the resumed weights (dropout draws from the CUDA RNG) equal the
uninterrupted run's."""

from __future__ import annotations

import torch

from tests.gpu._references import GPU, QUIET, SaveAt
from tests.helpers.reference import assert_same_weights, loader, make_data, make_model
from trainer import Trainer
from trainer.checkpoint import load_checkpoint, save_atomic

pytestmark = GPU


def test_a_checkpoint_with_two_cuda_rng_states_resumes_on_one_gpu(tmp_path):
    data, path, two = make_data(), tmp_path / "mid.ckpt", tmp_path / "two_gpus.ckpt"
    whole = make_model()  # dropout 0.1
    torch.manual_seed(1)
    Trainer(max_epochs=2, device="cuda", callbacks=[SaveAt(4, path)], **QUIET).fit(whole, loader(data))
    state = load_checkpoint(path)
    (own,) = state["rng"][0]["cuda"]  # one state: the device this rank used
    torch.cuda.manual_seed(999)
    other = torch.cuda.get_rng_state()  # a valid state, not this run's
    state["rng"][0]["cuda"] = [own, other]  # cuda:0's first, as get_rng_state_all() wrote it
    state.pop("_path", None)
    save_atomic(state, two)
    resumed = make_model(seed=9)
    torch.manual_seed(123)
    trainer = Trainer(max_epochs=2, device="cuda", **QUIET)
    trainer.fit(resumed, loader(data), ckpt_path=two)
    assert trainer.global_step == 20
    assert_same_weights(whole, resumed)
