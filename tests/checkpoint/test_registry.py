"""The registry of stateful parts: every checkpoint entry comes from one registered part,
parts restore in their order (the random streams last), and a new part needs one call."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.checkpoints import shuffled, trainer
from tests.helpers.reference import make_data, make_model
from trainer.checkpoint import CheckpointError
from trainer.checkpoint.registry import StateRegistry

# What a file holds besides the registered parts: the format marker, the cut, Lightning's keys.
_NOT_PARTS = {"format", "format_version", "cut", "state_dict", "epoch", "global_step", "hyper_parameters",
              "optimizer_states", "lr_schedulers", "pytorch-lightning_version", "loops"}


def test_a_key_is_registered_once():
    parts = StateRegistry()
    parts.register("loop", dict, None)
    with pytest.raises(ValueError, match=r"'loop' is already registered.*taken: loop"):
        parts.register("loop", dict, None)


def test_parts_restore_in_order_with_the_last_ones_at_the_end():
    order: list[str] = []
    parts = StateRegistry()
    for key, last in (("rng", True), ("module", False), ("loop", False)):
        parts.register(key, lambda key=key: key, lambda value, key=key: order.append(value), restore_last=last)
    saved = parts.collect(gather=lambda value: [value])
    assert saved == {"rng": "rng", "module": "module", "loop": "loop"}
    parts.restore(saved, rank=0)
    assert order == ["module", "loop", "rng"]


def test_a_per_rank_part_loads_its_own_rank_or_the_last():
    got: list[Any] = []
    parts = StateRegistry()
    parts.register("rng", lambda: "mine", got.append, per_rank=True)
    assert parts.collect(gather=lambda value: [value, "other"]) == {"rng": ["mine", "other"]}
    parts.restore({"rng": ["zero", "one"]}, rank=1)
    parts.restore({"rng": ["zero", "one"]}, rank=3)  # more processes than wrote the file
    assert got == ["one", "one"]
    assert parts.per_rank_counts({"rng": ["zero", "one"]}) == {"rng": 2}


def test_a_missing_required_entry_is_named_before_anything_loads_and_an_optional_one_loads_none():
    got: list[Any] = []
    parts = StateRegistry()
    parts.register("extras", lambda: 1, got.append, optional=True)
    parts.register("loop", lambda: 1, got.append)
    with pytest.raises(CheckpointError, match=r"Checkpoint 'x.ckpt' has no 'loop' entry"):
        parts.restore({"extras": 5}, rank=0, source="Checkpoint 'x.ckpt'")
    assert got == []  # nothing was loaded
    parts.restore({"loop": 7}, rank=0)
    assert got == [None, 7]


def test_every_entry_of_a_trainer_checkpoint_comes_from_a_registered_part(tmp_path):
    run = trainer(tmp_path, max_epochs=1)
    run.fit(make_model(), shuffled(make_data()))
    saved = torch.load(run.save_checkpoint(tmp_path / "a.ckpt"), weights_only=True)
    keys = set(saved) - _NOT_PARTS
    assert keys == {part.key for part in run._run.state_parts}
    assert [p.key for p in run._run.state_parts][-1] == "rng"  # restored last: nothing draws after it


class Counter:
    """A piece of state outside the Trainer's own (a user's sampler, a curriculum)."""

    def __init__(self) -> None:
        self.seen = 0

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = state["seen"]


def test_a_new_part_is_saved_and_restored_by_one_register_call(tmp_path):
    counter = Counter()
    run = trainer(tmp_path, max_epochs=1)
    run._run.state_parts.register("counter", counter.state_dict, counter.load_state_dict, optional=True)
    counter.seen = 41
    run.fit(make_model(), shuffled(make_data()))
    path = run.save_checkpoint(tmp_path / "a.ckpt")
    assert torch.load(path, weights_only=True)["counter"] == {"seen": 41}

    again, resumed = Counter(), trainer(tmp_path, max_epochs=2)
    resumed._run.state_parts.register("counter", again.state_dict, again.load_state_dict, optional=True)
    resumed.fit(make_model(), shuffled(make_data()), ckpt_path=path)
    assert again.seen == 41 and resumed.current_epoch == 2
