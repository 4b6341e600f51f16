"""beginner_source/knowledge_distillation_tutorial.py (its first method), ported to `Module`s.

The tutorial trains a teacher (`DeepNN`) and a student (`LightNN`) with cross-entropy
(`train`: Adam at 1e-3, `model.train()`, the average loss printed per epoch) and tests each
(`test`: `model.eval()`, `no_grad`, the accuracy printed); then trains a second student,
built on the same seed, by knowledge distillation (`train_knowledge_distillation`:
`teacher.eval()`, `student.train()`, the teacher's logits under `no_grad`, the soft-target
loss at temperature `T` scaled by T**2 plus the label loss, weighted 0.25/0.75), and tests it.

The ports, as a Lightning user writes them: `Classifier(net)` for `train`/`test` (`Trainer.fit`,
then `Trainer.test`), and `Distiller(teacher, student)` with the teacher put in eval mode once,
in `__init__`: the Trainer leaves a submodule's mode as the module set it (no `model.train()`
at the start of fit, as in Lightning 2), so the teacher's dropout stays off as in the
tutorial. All three networks end on the tutorial's weights and every printed line is equal.

Differences from the tutorial, for speed and with no download: CIFAR-10 is 32 training and 16
test random 3x32x32 images; the networks keep their layers but have fewer channels (teacher
16-8-8-4, student 4-4; hidden 32 and 16) and the classifiers' inputs shrink to match; 2 epochs
instead of 10; `num_workers=0` instead of 2.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = [pytest.mark.usefixtures("one_thread"),  # the teacher in eval mode: Lightning's warning, expected
              pytest.mark.filterwarnings("ignore:Found .* in eval mode at the start of training")]
EPOCHS, T, SOFT, CE = 2, 2, 0.25, 0.75


class DeepNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 8, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(8, 8, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(8, 4, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(nn.Linear(256, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class LightNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(4, 4, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.classifier = nn.Sequential(nn.Linear(256, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def distillation_loss(teacher_logits: torch.Tensor, student_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
    soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
    soft_targets_loss = -torch.sum(soft_targets * soft_prob) / soft_prob.size()[0] * (T ** 2)
    label_loss = nn.CrossEntropyLoss()(student_logits, labels)
    return SOFT * soft_targets_loss + CE * label_loss


class Classifier(Module):
    """`train` and `test` of the tutorial as steps; the lines they print in `printed`."""

    def __init__(self, net: nn.Module, printed: list[str]) -> None:
        super().__init__()
        self.net, self.printed = net, printed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.CrossEntropyLoss()(self(inputs), labels)

    def on_train_epoch_start(self) -> None:
        self.running_loss = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(*batch)
        self.running_loss += loss.item()
        return loss

    def on_train_epoch_end(self) -> None:
        batches = len(self.trainer.train_dataloader)
        self.printed.append(f"Epoch {self.current_epoch + 1}/{EPOCHS}, Loss: {self.running_loss / batches}")

    def on_test_epoch_start(self) -> None:
        self.correct, self.total = 0, 0

    def test_step(self, batch: Any, batch_idx: int) -> None:
        inputs, labels = batch
        _, predicted = torch.max(self(inputs).data, 1)
        self.total += labels.size(0)
        self.correct += (predicted == labels).sum().item()

    def on_test_epoch_end(self) -> None:
        self.printed.append(f"Test Accuracy: {100 * self.correct / self.total:.2f}%")

    def configure_optimizers(self) -> Any:
        return optim.Adam(self.parameters(), lr=0.001)


class Distiller(Classifier):
    def __init__(self, teacher: nn.Module, student: nn.Module, printed: list[str]) -> None:
        super().__init__(student, printed)
        self.teacher = teacher
        self.teacher.eval()  # Teacher set to evaluation mode, and left so by the Trainer

    def loss(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            teacher_logits = self.teacher(inputs)
        return distillation_loss(teacher_logits, self(inputs), labels)

    def configure_optimizers(self) -> Any:
        return optim.Adam(self.net.parameters(), lr=0.001)


def cifar10_like() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g))
    test = TensorDataset(torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=8, shuffle=False)


def original(epochs: int = EPOCHS) -> tuple[list[nn.Module], list[str]]:
    train_loader, test_loader = cifar10_like()
    printed: list[str] = []

    def train(model: nn.Module, teacher: nn.Module | None = None) -> None:
        optimizer = optim.Adam(model.parameters(), lr=0.001)
        if teacher is not None:
            teacher.eval()
        model.train()
        for epoch in range(epochs):
            running_loss = 0.0
            for inputs, labels in train_loader:
                optimizer.zero_grad()
                if teacher is None:
                    loss = nn.CrossEntropyLoss()(model(inputs), labels)
                else:
                    with torch.no_grad():
                        teacher_logits = teacher(inputs)
                    loss = distillation_loss(teacher_logits, model(inputs), labels)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            printed.append(f"Epoch {epoch + 1}/{EPOCHS}, Loss: {running_loss / len(train_loader)}")

    def test(model: nn.Module) -> None:
        model.eval()
        correct, total = 0, 0
        with torch.no_grad():
            for inputs, labels in test_loader:
                _, predicted = torch.max(model(inputs).data, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        printed.append(f"Test Accuracy: {100 * correct / total:.2f}%")

    torch.manual_seed(42)
    nn_deep = DeepNN(num_classes=10)
    train(nn_deep)
    test(nn_deep)
    torch.manual_seed(42)
    nn_light = LightNN(num_classes=10)
    torch.manual_seed(42)
    new_nn_light = LightNN(num_classes=10)
    train(nn_light)
    test(nn_light)
    train(new_nn_light, teacher=nn_deep)
    test(new_nn_light)
    return [nn_deep, nn_light, new_nn_light], printed


def ported(epochs: int = EPOCHS) -> tuple[list[nn.Module], list[str]]:
    train_loader, test_loader = cifar10_like()
    printed: list[str] = []

    def fit_and_test(module: Module) -> None:
        trainer = Trainer(max_epochs=epochs, **QUIET)
        trainer.fit(module, train_loader)
        trainer.test(module, test_loader)

    torch.manual_seed(42)
    nn_deep = DeepNN(num_classes=10)
    fit_and_test(Classifier(nn_deep, printed))
    torch.manual_seed(42)
    nn_light = LightNN(num_classes=10)
    torch.manual_seed(42)
    new_nn_light = LightNN(num_classes=10)
    fit_and_test(Classifier(nn_light, printed))
    distiller = Distiller(nn_deep, new_nn_light, printed)
    fit_and_test(distiller)
    assert not distiller.teacher.training and distiller.net.training  # test() restored each one's mode
    return [nn_deep, nn_light, new_nn_light], printed


def test_the_ports_train_the_tutorials_teacher_and_students() -> None:
    (nets, printed), (reference, expected) = ported(), original()
    for net, ref in zip(nets, reference):
        assert_same_weights(net, ref)
    assert printed == expected and len(printed) == 3 * (EPOCHS + 1)


def test_the_comparison_can_fail() -> None:
    """A teacher left in train mode (its dropout on) teaches another student."""
    (nets, _), (reference, _) = ported(), original()

    class TeacherInTrainMode(Distiller):
        def on_train_start(self) -> None:
            self.teacher.train()

    train_loader, _ = cifar10_like()
    torch.manual_seed(42)
    student = LightNN()
    torch.manual_seed(7)
    Trainer(max_epochs=EPOCHS, **QUIET).fit(TeacherInTrainMode(reference[0], student, []), train_loader)
    torch.manual_seed(42)
    same_student = LightNN()
    torch.manual_seed(7)
    Trainer(max_epochs=EPOCHS, **QUIET).fit(Distiller(reference[0], same_student, []), train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(student, same_student)
