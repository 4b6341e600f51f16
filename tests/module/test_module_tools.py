"""Lightning's plain LightningModule helpers, each compared with real Lightning's where it runs
without a Trainer (single process), and inside a fit where it needs one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningModule, Trainer

lightning = pytest.importorskip("lightning")


class Net(LightningModule):
    def __init__(self, hidden: int = 4) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, hidden)
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.layer(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TheirNet(lightning.pytorch.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 4)


def test_freeze_unfreeze_as_lightning() -> None:
    ours, theirs = Net(), TheirNet()
    assert ours.freeze() is ours and theirs.freeze() is theirs
    assert [p.requires_grad for p in ours.parameters()] == [False] * 4 and not ours.training and not theirs.training
    ours.unfreeze()
    assert all(p.requires_grad for p in ours.parameters()) and ours.training


def test_ranks_dtype_constants_and_strict_loading_as_lightning() -> None:
    ours, theirs = Net(), TheirNet()
    assert (ours.global_rank, ours.local_rank) == (theirs.global_rank, theirs.local_rank) == (0, 0)
    assert ours.dtype == theirs.dtype == torch.float32
    assert ours.double().dtype == torch.float64
    for name in ("CHECKPOINT_HYPER_PARAMS_KEY", "CHECKPOINT_HYPER_PARAMS_NAME", "CHECKPOINT_HYPER_PARAMS_TYPE"):
        assert getattr(Net, name) == getattr(TheirNet, name)
    assert ours.strict_loading is theirs.strict_loading is True
    ours.strict_loading = False
    assert ours.strict_loading is False


def test_all_gather_in_one_process_is_lightnings_identity_as_tensors() -> None:
    ours, theirs = Net(), TheirNet()
    data = {"a": torch.arange(3.0), "b": [1, 2.5]}
    mine, other = ours.all_gather(data), _gather_without_trainer(theirs, data)
    assert torch.equal(mine["a"], other["a"]) and mine["a"].shape == (3,)
    assert [torch.equal(x, y) for x, y in zip(mine["b"], other["b"])] == [True, True]


def _gather_without_trainer(module: lightning.pytorch.LightningModule, data: dict) -> dict:
    # Lightning's all_gather needs a Trainer's strategy; a single-device one returns its input as tensors.
    from lightning.pytorch.strategies import SingleDeviceStrategy

    strategy = SingleDeviceStrategy(torch.device("cpu"))
    from lightning.fabric.utilities.apply_func import convert_to_tensors as to_tensors
    from lightning_utilities.core.apply_func import apply_to_collection

    return apply_to_collection(to_tensors(data, device=torch.device("cpu")), torch.Tensor, strategy.all_gather)


def test_example_input_array_hparams_initial_and_torchscript(tmp_path: Path) -> None:
    net = Net(hidden=3)
    assert net.example_input_array is None
    net.example_input_array = torch.ones(1, 2)
    assert net.hparams_initial == {"hidden": 3}
    net.hparams.hidden = 5
    assert net.hparams_initial == {"hidden": 3}
    traced = net.to_torchscript(tmp_path / "net.pt", method="trace")
    assert torch.equal(traced(torch.ones(1, 2)), net(torch.ones(1, 2))) and (tmp_path / "net.pt").exists()
    assert net.training  # the mode is kept
    with pytest.raises(ValueError, match="'script' or 'trace'"):
        net.to_torchscript(method="export")


def test_to_onnx_says_what_to_install_when_onnx_is_missing(tmp_path: Path) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        with pytest.raises(ModuleNotFoundError, match="pip install onnx"):
            Net().to_onnx(tmp_path / "net.onnx", torch.ones(1, 2))
    else:
        Net().to_onnx(tmp_path / "net.onnx", torch.ones(1, 2))
        assert (tmp_path / "net.onnx").exists()


def test_toggled_optimizer_and_print_inside_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Toggling(Net):
        def configure_optimizers(self):
            return torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.head.parameters(), lr=0.1)

        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.flags: list[tuple[bool, bool]] = []

        def training_step(self, batch, batch_idx):
            first, _ = self.optimizers()
            with self.toggled_optimizer(first):
                self.flags.append((self.layer.weight.requires_grad, self.head.weight.requires_grad))
            self.flags.append((self.layer.weight.requires_grad, self.head.weight.requires_grad))
            self.print("step", batch_idx)
            first.step()

    model = Toggling()
    data = TensorDataset(torch.randn(4, 2), torch.randn(4, 1))
    Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, root_dir=tmp_path).fit(
        model, DataLoader(data, batch_size=2)
    )
    assert model.flags[:2] == [(True, False), (True, True)]
    assert "step 0" in capsys.readouterr().out


def test_print_inside_fit_is_written_above_the_progress_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tqdm.auto

    written: list[str] = []
    monkeypatch.setattr(tqdm.auto.tqdm, "write", lambda text, *args, **kwargs: written.append(text))

    class Printing(Net):
        def training_step(self, batch, batch_idx):
            self.print("step", batch_idx)
            return super().training_step(batch, batch_idx)

    data = TensorDataset(torch.randn(4, 2), torch.randn(4, 1))
    Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=True, root_dir=tmp_path).fit(
        Printing(), DataLoader(data, batch_size=2)
    )
    assert written == ["step 0", "step 1"]  # through the bar's writer: the bar stays intact
