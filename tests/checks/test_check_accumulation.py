"""`trainer.check_accumulation`: a padded-sequence loss averaged per micro-batch over uneven
token counts gives another gradient accumulated than on the whole batch (flagged, with the
ratio); its `num_items` version gives the same one. The gradients it compares are checked
against ones computed here by hand."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.items import make_item_model, make_token_data
from trainer import check_accumulation

K = 3


def padded_batch() -> tuple[torch.Tensor, ...]:
    batch = make_token_data(12)[:12]
    counts = [int(part.sum()) for part in torch.tensor_split(batch[2], K)]
    assert len(set(counts)) == K  # uneven token counts per micro-batch
    return batch


def by_hand(mean_rule: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch's gradient and the Trainer's accumulated one (loss / K, or summed / total)."""
    batch = padded_batch()
    grads = []
    for parts in ([batch], [tuple(t[i] for t in batch) for i in [range(0, 4), range(4, 8), range(8, 12)]]):
        model = make_item_model(mean_rule=mean_rule).eval()
        total = sum(p[2].sum() for p in parts)
        for part in parts:
            summed, count = model.summed_loss(part)
            (summed / count / len(parts) if mean_rule else summed / total).backward()
        grads.append(torch.cat([p.grad.reshape(-1).double() for p in model.parameters()]))
    return grads[0], grads[1]


def test_a_per_micro_batch_mean_over_uneven_tokens_is_flagged_with_its_ratio():
    report = check_accumulation(make_item_model(mean_rule=True), padded_batch(), micro_batches=K)
    whole, accumulated = by_hand(mean_rule=True)
    assert not report.ok
    assert report.kind == "a mean over a varying number of items"
    assert report.ratio == pytest.approx(float(accumulated.norm() / whole.norm()), rel=1e-6)
    assert abs(report.ratio - 1) > 0.01
    assert "num_items" in report.advice and f"gradient ratio {report.ratio:.4g}" in report.advice
    assert "DIFFERENT gradient" in str(report)


def test_its_num_items_version_gives_the_whole_batch_gradient():
    report = check_accumulation(make_item_model(), padded_batch(), micro_batches=K)
    whole, accumulated = by_hand(mean_rule=False)
    assert torch.allclose(whole, accumulated, rtol=1e-5, atol=1e-7)
    assert report.ok, str(report)
    assert report.kind == "item-weighted (num_items)"
    assert report.ratio == pytest.approx(1.0, abs=1e-5)


class Summed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).sum()


class Mean(Summed):
    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()


def test_a_sum_is_named_and_a_plain_mean_over_equal_micro_batches_passes():
    torch.manual_seed(0)
    batch = torch.randn(8, 2)
    summed = check_accumulation(Summed(), batch, micro_batches=4)
    assert not summed.ok and summed.kind == "a sum" and summed.ratio == pytest.approx(0.25, rel=1e-5)
    mean = check_accumulation(Mean(), batch, micro_batches=4)
    assert mean.ok and mean.kind == "a mean per micro-batch"


def test_the_module_and_random_streams_are_left_as_they_were():
    model = make_item_model(mean_rule=True)  # dropout: the check runs on copies in eval mode
    before = torch.get_rng_state()
    check_accumulation(model, padded_batch(), micro_batches=K)
    assert torch.equal(torch.get_rng_state(), before)
    assert model.training and all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="at least 2 micro-batches"):
        check_accumulation(model, padded_batch(), micro_batches=1)
