"""intermediate_source/torch_compile_tutorial.py, with the compiled model given to the Trainer.

The tutorial trains with `opt.zero_grad(True)`, `pred = mod(data[0])`,
`CrossEntropyLoss()(pred, data[1])`, backward, `opt.step()` on fresh random data each
iteration (`generate_data(16)`), Adam with its defaults; evaluates under `torch.no_grad()`;
and shows what TorchDynamo captures with a custom backend that records the FX graph and
returns `gm.forward`. A Lightning user hands the compiled model to the Trainer:
`trainer.fit(torch.compile(model))`, as Lightning 2 accepts it (its `from_compiled`: the module
inside runs `forward` and its step methods with that compilation). The port does that with
the tutorial's custom backend and ends on the weights of the tutorial's loop training the
same compiled model (`torch.equal`), with graphs captured in both; `trainer.predict` on the
compiled model gives the tutorial's `evaluate` outputs.

Differences from the tutorial, for speed on a CPU: torchvision's ResNet-18 is `init_model()`, a
small convolutional classifier; images 3x16x16 instead of 3x128x128, ten classes; the
tutorial's custom backend (which runs the captured graphs as they are) instead of inductor,
whose compile would take most of a minute here (docs/performance.md has inductor's
comparison); the model compiled instead of the `train` function (`torch.compile(train)`
would compile the optimizer step too, which the Trainer runs itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore::UserWarning")]  # dynamo's notes on graph breaks
N_ITERS = 6
graphs: list[torch.fx.GraphModule] = []


def custom_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
    graphs.append(gm)  # the tutorial prints gm.graph.print_tabular()
    return gm.forward


class Classifier(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        pred = self(batch[0])
        return torch.nn.CrossEntropyLoss()(pred, batch[1])

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters())


def init_model() -> Classifier:
    return Classifier().to(torch.float32)


def generate_data(b: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, 3, 16, 16).to(torch.float32), torch.randint(10, (b,))


class FreshData:
    """`generate_data(16)` at each iteration, as the tutorial's loop calls it."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (generate_data(16) for _ in range(N_ITERS))

    def __len__(self) -> int:
        return N_ITERS


def original(iters: int = N_ITERS) -> tuple[Classifier, torch.Tensor]:
    torch._dynamo.reset()
    graphs.clear()
    torch.manual_seed(0)
    model = init_model()
    opt = torch.optim.Adam(model.parameters())
    opt_model = torch.compile(model, backend=custom_backend)

    def train(mod: Any, data: tuple[torch.Tensor, torch.Tensor]) -> None:
        opt.zero_grad(True)
        pred = mod(data[0])
        loss = torch.nn.CrossEntropyLoss()(pred, data[1])
        loss.backward()
        opt.step()

    for _ in range(iters):
        train(opt_model, generate_data(16))
    model.eval()
    with torch.no_grad():  # the tutorial's evaluate(mod, inp)
        return model, opt_model(generate_data(16)[0])


def ported() -> tuple[Classifier, torch.Tensor, int]:
    torch._dynamo.reset()
    graphs.clear()
    torch.manual_seed(0)
    model = init_model()
    opt_model = torch.compile(model, backend=custom_backend)
    trainer = Trainer(max_epochs=1, **QUIET)
    trainer.fit(opt_model, FreshData())  # type: ignore[arg-type]
    captured = len(graphs)
    (prediction,) = trainer.predict(opt_model, [generate_data(16)])  # type: ignore[arg-type]
    return model, prediction, captured


def test_the_compiled_model_trains_to_the_tutorials_weights() -> None:
    model, prediction, captured = ported()
    reference, expected = original()
    assert captured > 0 and len(graphs) > 0  # dynamo captured the forward in both runs
    assert_same_weights(model, reference)
    assert torch.equal(prediction, expected)
    assert not any(key.startswith("_orig_mod.") for key in model.state_dict())


def test_one_way_of_compiling() -> None:
    with pytest.raises(ValueError, match=r"torch.compile\(Classifier\) and Trainer\(compile=True\)"):
        Trainer(compile=True, **QUIET).fit(torch.compile(init_model(), backend="eager"), FreshData())  # type: ignore[arg-type]


def test_a_compiled_plain_module_is_refused_with_what_to_write() -> None:
    with pytest.raises(TypeError, match=r"torch.compile\(...\) of Linear.*Subclass trainer.Module"):
        Trainer(**QUIET).fit(torch.compile(nn.Linear(2, 1), backend="eager"), FreshData())  # type: ignore[arg-type]


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported()[0], original(N_ITERS - 1)[0])
