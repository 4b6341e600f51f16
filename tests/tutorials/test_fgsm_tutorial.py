"""beginner_source/fgsm_tutorial.py (adversarial examples), its `test` ported to `Trainer.test`.

The tutorial loads a trained LeNet (`model.eval()`), then for each epsilon runs `test`: one
image at a time from a shuffled loader, `data.requires_grad = True`, forward, skip when the
clean prediction is wrong, else `nll_loss`, `model.zero_grad()`, `loss.backward()`, the
perturbed image `clamp(data + epsilon * sign(data.grad), 0, 1)` re-classified; it returns
the accuracy and up to five adversarial examples (for epsilon 0, the unchanged successes).

The port is `test_step` under `Trainer(inference_mode=False)` with the step's work inside
`torch.enable_grad()`: an evaluation pass runs without gradients (under `torch.no_grad` with
`inference_mode=False`, under `torch.inference_mode` by default, where asking for the input's
gradient fails with a message that says to write exactly this). Per epsilon, the port
prints the tutorial's line and returns the same examples, on the same shuffled order.

Differences from the tutorial, with no download: the pretrained `lenet_mnist_model.pth` is the
same `Net` with seeded weights (saved with `torch.save(state_dict)` and loaded as the tutorial
loads it); MNIST's test set is 12 random 28x28 images, eight of them labelled with the net's
own prediction so that the attack has work to do; three epsilons instead of seven.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
epsilons = [0, .1, .3]


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)

    def attack(self, data: torch.Tensor, target: torch.Tensor, epsilon: float) -> None:
        """The body of the tutorial's loop over the test set."""
        data.requires_grad = True
        output = self(data)
        init_pred = output.max(1, keepdim=True)[1]  # get the index of the max log-probability
        if init_pred.item() != target.item():
            return
        loss = F.nll_loss(output, target)
        self.zero_grad()
        loss.backward()
        data_grad = data.grad.data  # type: ignore[union-attr]
        perturbed_data = fgsm_attack(data, epsilon, data_grad)
        output = self(perturbed_data)
        final_pred = output.max(1, keepdim=True)[1]
        if final_pred.item() == target.item():
            self.correct += 1
            if (epsilon == 0) and (len(self.adv_examples) < 5):
                adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
                self.adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))
        elif len(self.adv_examples) < 5:
            adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
            self.adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))

    def start(self) -> None:
        self.correct, self.adv_examples = 0, []  # type: ignore[var-annotated]

    def result(self, epsilon: float, n: int) -> tuple[float, list[Any], str]:
        final_acc = self.correct / float(n)
        return final_acc, self.adv_examples, f"Epsilon: {epsilon}\tTest Accuracy = {self.correct} / {n} = {final_acc}"

    # the port: one Trainer.test per epsilon
    def on_test_epoch_start(self) -> None:
        self.start()

    def test_step(self, batch: Any, batch_idx: int) -> None:
        data, target = batch
        with torch.enable_grad():  # an evaluation pass runs without gradients; this attack needs them
            self.attack(data, target, self.epsilon)


def fgsm_attack(image: torch.Tensor, epsilon: float, data_grad: torch.Tensor) -> torch.Tensor:
    sign_data_grad = data_grad.sign()
    perturbed_image = image + epsilon * sign_data_grad
    perturbed_image = torch.clamp(perturbed_image, 0, 1)
    return perturbed_image


def pretrained_model(tmp_path: Path) -> tuple[Path, DataLoader]:
    torch.manual_seed(0)
    net = Net().eval()
    images = torch.rand(12, 1, 28, 28)
    with torch.no_grad():
        labels = net(images).argmax(1)
    labels[8:] = torch.randint(0, 10, (4,))
    torch.save(net.state_dict(), tmp_path / "lenet_mnist_model.pth")
    return tmp_path / "lenet_mnist_model.pth", DataLoader(TensorDataset(images, labels), batch_size=1, shuffle=True)


def loaded(path: Path) -> Net:
    model = Net()
    model.load_state_dict(torch.load(path, map_location='cpu', weights_only=True))
    return model.eval()


def original(tmp_path: Path) -> list[tuple[float, list[Any], str]]:
    path, test_loader = pretrained_model(tmp_path)
    torch.manual_seed(1)
    model, results = loaded(path), []
    for eps in epsilons:
        model.start()
        for data, target in test_loader:
            model.attack(data, target, eps)
        results.append(model.result(eps, len(test_loader)))
    return results


def ported(tmp_path: Path, shuffle: bool = True, **trainer_args: Any) -> list[tuple[float, list[Any], str]]:
    path, test_loader = pretrained_model(tmp_path)
    if not shuffle:
        test_loader = DataLoader(test_loader.dataset, batch_size=1)
    torch.manual_seed(1)
    model, results = loaded(path), []
    trainer = Trainer(**dict(QUIET, **trainer_args))
    for eps in epsilons:
        model.epsilon = eps
        trainer.test(model, test_loader)
        results.append(model.result(eps, len(test_loader)))
    return results


def _same(a: list[tuple[float, list[Any], str]], b: list[tuple[float, list[Any], str]]) -> bool:
    return [(acc, line, [(i, f, ex.tolist()) for i, f, ex in examples]) for acc, examples, line in a] == [
        (acc, line, [(i, f, ex.tolist()) for i, f, ex in examples]) for acc, examples, line in b]


def test_the_port_finds_the_tutorials_adversarial_examples(tmp_path: Path) -> None:
    results, reference = ported(tmp_path, inference_mode=False), original(tmp_path)
    assert _same(results, reference)
    accuracies = [acc for acc, _, _ in reference]
    assert accuracies[0] >= 8 / 12 and accuracies[-1] < accuracies[0]  # the attack did change predictions
    assert len(reference[1][1]) > 0


def test_under_inference_mode_the_error_says_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"Expected Trainer\(inference_mode=False\).*torch.enable_grad\(\)"):
        ported(tmp_path)  # Trainer(inference_mode=True), Lightning's default


class WithoutEnableGrad(Net):
    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.attack(*batch, self.epsilon)


def test_under_no_grad_the_error_says_what_to_write(tmp_path: Path) -> None:
    """The tutorial's loop as test_step, as it is: autograd's own error, and what to write."""
    path, test_loader = pretrained_model(tmp_path)
    model = WithoutEnableGrad()
    model.load_state_dict(torch.load(path, weights_only=True))
    model.epsilon = 0.1
    with pytest.raises(RuntimeError, match=r"(?s)does not require grad.*test_step needs gradients.*runs under "
                                           r"torch.no_grad.*inside `with torch.enable_grad\(\):` in the step"):
        Trainer(inference_mode=False, **QUIET).test(model, test_loader)


def test_the_comparison_can_fail(tmp_path: Path) -> None:
    """An unshuffled loader attacks the images in another order: other examples are kept."""
    reference = original(tmp_path)
    assert not _same(ported(tmp_path, shuffle=False, inference_mode=False), reference)
