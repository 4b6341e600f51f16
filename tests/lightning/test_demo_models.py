"""`trainer.demos.transformer`, `.lstm` and `.mnist_datamodule` train as Lightning's
`lightning.pytorch.demos` modules: each demo trained under both in one process, on a small text
file or MNIST folder written in the format both read, ends with the same weights."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

lightning = pytest.importorskip("lightning")

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def _write_text(folder: Path, lines: int = 330) -> Path:
    """A small WikiText2 stand-in: `lines` lines of 8 words over a 15-word vocabulary."""
    generator = torch.Generator().manual_seed(0)
    words = torch.randint(15, (lines, 8), generator=generator).tolist()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wikitext-2.txt"
    path.write_text("".join(" ".join(f"w{i}" for i in line) + "\n" for line in words), encoding="utf8")
    return path


def _trainer(framework: str, root: Path, **options: Any) -> Any:
    if framework == "lightning":
        return lightning.pytorch.Trainer(default_root_dir=root / framework, accelerator="cpu", **QUIET, **options)
    from trainer import Trainer

    return Trainer(default_root_dir=root / framework, accelerator="cpu", **QUIET, **options)


def _demos(framework: str, name: str) -> Any:
    return importlib.import_module(f"{'lightning.pytorch' if framework == 'lightning' else 'trainer'}.demos.{name}")


def _assert_same(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)
    assert all(torch.isfinite(value).all() for value in mine.values() if value.is_floating_point())
    assert [key for key in mine if not torch.equal(mine[key], other[key])] == []


def _language_model(module: Any, name: str, vocab: int) -> torch.nn.Module:
    """The demo's LightningModule; the LSTM's default network (4 x 512) is swapped for a small
    `SimpleLSTM` of the same module, so its steps stay cheap (its default initialisation is
    compared on its own)."""
    torch.manual_seed(0)
    if name == "transformer":
        return module.LightningTransformer(vocab)
    model = module.LightningLSTM(vocab)
    model.model = module.SimpleLSTM(vocab, ninp=32, nhid=32, nlayers=2)
    return model


@pytest.mark.parametrize("name", ["transformer", "lstm"])
def test_the_language_models_train_to_lightnings_weights(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # both read `./data/wikitext-2.txt`, as Lightning's demo does
    _write_text(tmp_path / "data")
    vocab = _demos("ours", "transformer").WikiText2().vocab_size
    models, trainers = {}, {}
    for framework in ("ours", "lightning"):
        models[framework] = _language_model(_demos(framework, name), name, vocab)
        limits = dict(max_epochs=1, limit_train_batches=3) if name == "transformer" else dict(max_epochs=2, limit_train_batches=2)
        trainers[framework] = _trainer(framework, tmp_path, **limits)
        trainers[framework].fit(models[framework])
    fresh = _language_model(_demos("ours", name), name, vocab)
    assert not torch.equal(models["ours"].model.decoder.weight, fresh.model.decoder.weight)
    _assert_same(models["ours"], models["lightning"])
    assert trainers["ours"].global_step == trainers["lightning"].global_step == (3 if name == "transformer" else 4)
    theirs = {key: float(value) for key, value in trainers["lightning"].callback_metrics.items()}
    assert {key: float(trainers["ours"].callback_metrics[key]) for key in theirs} == theirs


def test_the_default_networks_start_from_lightnings_weights():
    """Every default but the vocabulary (WikiText2's 33278 words would only make it slow)."""
    for name, make in (("transformer", lambda module: module.Transformer(vocab_size=100)),
                       ("transformer", lambda module: module.LightningTransformer(vocab_size=100)),
                       ("lstm", lambda module: module.LightningLSTM(vocab_size=100))):
        nets = []
        for framework in ("ours", "lightning"):
            torch.manual_seed(0)
            nets.append(make(_demos(framework, name)))
        mine, other = nets[0].state_dict(), nets[1].state_dict()
        assert list(mine) == list(other)
        assert [key for key in mine if not torch.equal(mine[key], other[key])] == []


def test_the_text_is_read_as_lightning_reads_it(tmp_path):
    path = _write_text(tmp_path, lines=20)
    with path.open("a", encoding="utf8") as file:
        file.write("\n  a   tab\tseparated line  \n")
    ours, theirs = _demos("ours", "transformer").tokenize(path), _demos("lightning", "transformer").tokenize(path)
    assert torch.equal(ours[0], theirs[0]) and ours[0].dtype == theirs[0].dtype
    assert ours[1].idx2word == theirs[1].idx2word and ours[1].word2idx == theirs[1].word2idx
    data = {framework: _demos(framework, "transformer").WikiText2(tmp_path, block_size=7, download=False)
            for framework in ("ours", "lightning")}
    assert len(data["ours"]) == len(data["lightning"]) > 0
    for index in (0, len(data["ours"]) - 1):
        assert all(torch.equal(a, b) for a, b in zip(data["ours"][index], data["lightning"][index]))
    for size, batch in ((10, 3), (83, 20), (5, 5)):
        samplers = [_demos(framework, "lstm").SequenceSampler(range(size), batch) for framework in ("ours", "lightning")]
        assert list(samplers[0]) == list(samplers[1]) and len(samplers[0]) == len(samplers[1])


def test_missing_text_says_where_and_how_and_leaves_no_empty_file(tmp_path, monkeypatch):
    from trainer.demos.transformer import WikiText2

    with pytest.raises(FileNotFoundError, match="wikitext-2.txt"):
        WikiText2(tmp_path / "nowhere", download=False)

    def offline(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(FileNotFoundError, match=r"(?s)no network.*Fix: copy the file") as error:
        WikiText2(tmp_path / "offline")
    assert str(tmp_path / "offline" / "wikitext-2.txt") in str(error.value)
    assert not (tmp_path / "offline" / "wikitext-2.txt").exists()


def _write_mnist(root: Path, train: int = 120, test: int = 40) -> None:
    folder = root / "MNIST" / "complete"
    folder.mkdir(parents=True)
    generator = torch.Generator().manual_seed(1)
    for name, count in (("training.pt", train), ("test.pt", test)):
        images = torch.randint(256, (count, 28, 28), generator=generator, dtype=torch.uint8)
        torch.save((images, torch.randint(10, (count,), generator=generator)), folder / name)


def _classifier(base: type) -> type:
    class Classifier(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 32), torch.nn.ReLU(),
                                           torch.nn.Dropout(0.1), torch.nn.Linear(32, 10))

        def _loss(self, batch: Any) -> torch.Tensor:
            images, labels = batch
            return torch.nn.functional.cross_entropy(self.net(images / 255.0), labels)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self._loss(batch)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.log("test_loss", self._loss(batch))

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    return Classifier


def test_the_mnist_datamodule_trains_to_lightnings_weights(tmp_path, monkeypatch):
    """Lightning reads the hosted files only with `PL_USE_MOCKED_MNIST` set (without torchvision it
    stops otherwise); ours reads them without (where torchvision is installed, both would use
    torchvision's dataset without it, so it is set for both)."""
    torchvision = importlib.util.find_spec("torchvision") is not None
    _write_mnist(tmp_path / "mnist")
    runs = {}
    for framework in ("ours", "lightning"):
        if framework == "lightning" or torchvision:
            monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
        else:
            monkeypatch.delenv("PL_USE_MOCKED_MNIST", raising=False)
        module = _demos(framework, "mnist_datamodule")
        data = module.MNISTDataModule(data_dir=str(tmp_path / "mnist"), val_split=24, num_workers=0, batch_size=16)
        base = lightning.pytorch.LightningModule if framework == "lightning" else __import__("trainer").LightningModule
        torch.manual_seed(0)
        model = _classifier(base)()
        trainer = _trainer(framework, tmp_path, max_epochs=2, num_sanity_val_steps=0)
        trainer.fit(model, datamodule=data)
        fitted = {key: float(value) for key, value in trainer.callback_metrics.items()}
        tested = trainer.test(model, datamodule=data, verbose=False)[0]
        runs[framework] = (model, trainer, fitted, {key: float(value) for key, value in tested.items()})
    (ours, our_trainer, our_fit, our_test), (theirs, their_trainer, their_fit, their_test) = runs["ours"], runs["lightning"]
    _assert_same(ours, theirs)
    assert our_trainer.global_step == their_trainer.global_step == 2 * ((120 - 24) // 16)
    assert {key: our_fit.get(key) for key in their_fit} == their_fit and "val_loss" in their_fit
    assert our_test == their_test and "test_loss" in their_test


def test_mnist_items_and_missing_data(tmp_path, monkeypatch):
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
    _write_mnist(tmp_path, train=6, test=3)
    ours, theirs = _demos("ours", "mnist_datamodule"), _demos("lightning", "mnist_datamodule")
    for train, normalize in ((True, (0.1307, 0.3081)), (False, None), (True, (0.5, 0.25))):
        mine = ours.MNIST(str(tmp_path), train=train, normalize=normalize, download=False)
        other = theirs.MNIST(str(tmp_path), train=train, normalize=normalize, download=False)
        assert len(mine) == len(other) == (6 if train else 3)
        for index in range(len(mine)):
            assert torch.equal(mine[index][0], other[index][0]) and mine[index][1] == other[index][1]
            assert type(mine[index][1]) is int
    monkeypatch.delenv("PL_USE_MOCKED_MNIST")
    empty = tmp_path / "empty"
    with pytest.raises(RuntimeError, match=r"(?s)download=False.*training\.pt.*Fix:") as error:
        ours.MNIST(str(empty), download=False)
    assert os.path.join(str(empty), "MNIST", "complete") in str(error.value)

    def offline(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(RuntimeError, match="no network"):
        ours.MNISTDataModule(data_dir=str(empty), num_workers=0).prepare_data()
    assert not any(path.is_file() for path in empty.rglob("*"))


def test_with_torchvision_installed_mnist_is_torchvisions(tmp_path, monkeypatch):
    """As in Lightning: torchvision's dataset and transforms when it is installed (here a stand-in
    package on the path), unless `PL_USE_MOCKED_MNIST` asks for the hosted copy."""
    package = tmp_path / "site" / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "datasets.py").write_text(
        "class MNIST:\n    def __init__(self, *args, **kwargs):\n        self.args, self.kwargs = args, kwargs\n")
    (package / "transforms.py").write_text(
        "class ToTensor:\n    pass\n"
        "class Normalize:\n    def __init__(self, mean, std):\n        self.mean, self.std = mean, std\n"
        "class Compose:\n    def __init__(self, steps):\n        self.steps = steps\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delenv("PL_USE_MOCKED_MNIST", raising=False)
    from trainer.demos import mnist_datamodule as ours

    try:
        dataset = ours.MNIST(str(tmp_path), train=False, download=True)
        assert type(dataset).__module__ == "torchvision.datasets"
        assert dataset.args == (str(tmp_path),) and dataset.kwargs == {"train": False, "download": True}
        plain = ours.MNISTDataModule(num_workers=0).default_transforms
        assert type(plain).__name__ == "ToTensor"
        steps = ours.MNISTDataModule(num_workers=0, normalize=True).default_transforms.steps
        assert [type(step).__name__ for step in steps] == ["ToTensor", "Normalize"] and steps[1].mean == (0.5,)
        monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
        _write_mnist(tmp_path, train=4, test=2)
        assert len(ours.MNIST(str(tmp_path), train=False, download=False)) == 2
    finally:
        for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
            del sys.modules[name]


def test_importing_the_transformer_demo_gives_attention_layers_reset_parameters(tmp_path):
    """Lightning's demo module does this on import; a project re-initialising every module with
    `reset_parameters()` then resets attention layers too (checked in a fresh process, since
    importing Lightning's demo here has already done it)."""
    import subprocess

    code = ("import torch; had = hasattr(torch.nn.MultiheadAttention, 'reset_parameters')\n"
            "import trainer.demos.transformer\n"
            "print(had, torch.nn.MultiheadAttention.reset_parameters is torch.nn.MultiheadAttention._reset_parameters)")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    had, patched = done.stdout.split()
    assert had == "True" or patched == "True"  # torch's own method, where a later torch has one
