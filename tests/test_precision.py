"""The precision strategies as units: state, the unscale-once rule, the step report."""

from __future__ import annotations

import pytest
import torch

from trainer import precision as P


def _model_and_grads(scale: float = 1.0):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    (model(torch.randn(3, 4)).sum() * scale).backward()
    return model, opt


def test_total_norm_fallback_matches_clip_grad_norm(monkeypatch):
    model, _ = _model_and_grads()
    grads = [p.grad for p in model.parameters()]
    expected = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    assert torch.equal(P._total_norm(grads), expected)
    monkeypatch.delattr(torch.nn.utils, "get_total_norm")  # torch < 2.6 has none
    torch.testing.assert_close(P._total_norm(grads), expected)


def test_amp_state_survives_before_and_after_setup():
    amp = P.AMP(init_scale=8.0, growth_interval=3)
    amp.setup(torch.device("cpu"))
    state = amp.state_dict()
    assert state["scale"] == 8.0 and state["growth_interval"] == 3
    fresh = P.AMP()
    fresh.load_state_dict(state)  # before setup: kept until the scaler exists
    assert fresh.state_dict()["scale"] == 8.0
    fresh.setup(torch.device("cpu"))
    assert fresh.scaler.get_scale() == 8.0


def test_amp_unscales_once_and_reports_skipped_steps():
    amp = P.AMP(init_scale=4.0)
    amp.setup(torch.device("cpu"))
    model, opt = _model_and_grads()
    opt.zero_grad()
    amp.backward(model(torch.randn(3, 4)).sum())
    norm_a = amp.gradient_norm(opt)
    norm_b = amp.gradient_norm(opt)  # a second unscale_ would raise inside GradScaler
    assert torch.equal(norm_a, norm_b)
    assert amp.optimizer_step(opt) is True
    opt.zero_grad()
    amp.backward(model(torch.randn(3, 4)).sum() * float("inf"))
    before = [p.detach().clone() for p in model.parameters()]
    assert amp.optimizer_step(opt) is False  # skipped: non-finite gradients
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert amp.scaler.get_scale() == 2.0


def test_base_precision_is_a_complete_null_object():
    base = P.Precision()
    base.setup(torch.device("cpu"))
    model, opt = _model_and_grads(scale=100.0)
    assert base.loss_scale() is None and base.state_dict() == {}
    norm = base.clip_gradients(opt, 1.0, "norm")
    assert norm is not None and norm > 1.0
    assert torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")) == pytest.approx(1.0, rel=1e-5)
    assert base.optimizer_step(opt) is True


def test_resolve_precision_names_the_accepted_values():
    with pytest.raises(ValueError, match="'fp32', 'amp', 'bf16'.*Received: 'fp16' of type str"):
        P.resolve_precision("fp16")
    assert isinstance(P.resolve_precision("bf16"), P.BF16)
