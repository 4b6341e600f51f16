"""pytorch/examples' reinforcement_learning, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/reinforcement_learning.py),
and the numbers the script prints are equal.

One episode per batch from an endless iterable (no len()); each episode's rollout runs in
training_step, under the precision's autocast as in the amp/bf16 originals; "Solved" is
`trainer.should_stop = True`, which stops after that episode's step.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.reinforcement_learning import EPISODE_CAP, episodes, make_agent, original_agent
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", ["reinforce", "actor_critic"])
def test_reinforcement_learning(kind: str, precision: str) -> None:
    model = make_agent(kind)
    trainer = Trainer(precision=precision, max_epochs=1, **QUIET)
    trainer.fit(model, episodes())
    reference = original_agent(kind, precision)
    assert_same_weights(model, reference)
    assert model.ep_rewards == reference.ep_rewards and model.running_reward == reference.running_reward
    assert reference.solved() and len(reference.ep_rewards) < EPISODE_CAP  # the stop criterion ended both
    assert trainer.global_step == len(model.ep_rewards)
