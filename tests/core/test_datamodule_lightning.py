"""DataModule's Lightning surface: `from_datasets`, `hparams_initial`, `load_from_checkpoint`,
`name`, `on_exception`; each compared with Lightning's `LightningDataModule` where it claims to match."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

from trainer import DataModule

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L


class Data(L.LightningDataModule):
    def __init__(self, batch_size: int = 2, scale: float = 1.0):
        super().__init__()
        self.save_hyperparameters()
        self.seen = 0

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.arange(8.0).unsqueeze(1) * self.hparams.scale), batch_size=self.hparams.batch_size)

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        self.trainer.datamodule.seen += 1
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def save(path):
    data = Data(batch_size=4, scale=0.5)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(path.parent))
    trainer.fit(Net(), datamodule=data)
    trainer.save_checkpoint(path)
    return data
'''


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin(source: str) -> str:
    return "\n".join("import lightning.pytorch as L" if line == "import trainer as L" else line
                     for line in source.splitlines())


def _batches(loader: Any) -> list[list[torch.Tensor]]:
    return [list(batch) for batch in loader]


def test_from_datasets_reads_as_lightnings() -> None:
    pl = pytest.importorskip("lightning.pytorch")
    train = TensorDataset(torch.arange(10.0))
    val = {"a": TensorDataset(torch.arange(4.0)), "b": TensorDataset(torch.arange(6.0))}
    test = [TensorDataset(torch.arange(3.0))]
    made = {}
    for framework, base in (("ours", DataModule), ("lightning", pl.LightningDataModule)):
        data = base.from_datasets(train_dataset=train, val_dataset=val, test_dataset=test, batch_size=3)
        torch.manual_seed(7)
        made[framework] = (_batches(data.train_dataloader()), {k: _batches(v) for k, v in data.val_dataloader().items()},
                           [_batches(loader) for loader in data.test_dataloader()])
    ours, theirs = made["ours"], made["lightning"]
    assert len(ours[0]) == 4 and sorted(torch.cat([b[0] for b in ours[0]]).tolist()) == list(range(10))
    for mine, lightning in zip(ours, theirs):
        assert repr(mine) == repr(lightning)
    assert torch.cat([b[0] for b in ours[0]]).tolist() != list(range(10))  # shuffled


def test_from_datasets_forwards_batch_size_to_init_and_defines_only_given_loaders() -> None:
    class Sized(DataModule):
        def __init__(self, batch_size: int, note: str = "") -> None:
            super().__init__()
            self.batch_size, self.note = batch_size, note

    data = Sized.from_datasets(predict_dataset=TensorDataset(torch.ones(4)), batch_size=2, note="x")
    assert (data.batch_size, data.note, data.hparams) == (2, "x", {"batch_size": 2, "note": "x"})
    assert len(data.predict_dataloader()) == 2 and data.val_dataloader() is None
    with pytest.raises(NotImplementedError):
        data.train_dataloader()


def test_hparams_initial_keeps_the_first_values_as_lightning() -> None:
    pl = pytest.importorskip("lightning.pytorch")
    ours, theirs = _load(PROJECT, "dm_ours").Data(batch_size=3), _load(_twin(PROJECT), "dm_theirs").Data(batch_size=3)
    for data in (ours, theirs):
        data.hparams.batch_size = 9
    assert dict(ours.hparams_initial) == dict(theirs.hparams_initial) == {"batch_size": 3, "scale": 1.0}
    assert ours.hparams.batch_size == 9 and ours.hparams_initial.batch_size == 3
    assert isinstance(theirs, pl.LightningDataModule)


def test_load_from_checkpoint_reads_a_lightning_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    theirs_module, ours_module = _load(_twin(PROJECT), "dm_save_theirs"), _load(PROJECT, "dm_save_ours")
    path = tmp_path / "lightning.ckpt"
    saved = theirs_module.save(path)
    lightning = theirs_module.Data.load_from_checkpoint(path, scale=2.0)
    ours = ours_module.Data.load_from_checkpoint(path, scale=2.0)
    assert saved.seen == 2
    assert dict(ours.hparams) == dict(lightning.hparams) == {"batch_size": 4, "scale": 2.0}
    assert ours.seen == lightning.seen == 2


def test_load_from_checkpoint_hparams_file_and_unknown_names(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    module = _load(_twin(PROJECT), "dm_file_theirs")
    path = tmp_path / "lightning.ckpt"
    module.save(path)
    (tmp_path / "hp.yaml").write_text("batch_size: 8\nunknown: 1\n")
    ours = _load(PROJECT, "dm_file_ours").Data.load_from_checkpoint(path, hparams_file=tmp_path / "hp.yaml")
    assert dict(ours.hparams) == {"batch_size": 8, "scale": 1.0}
    with pytest.raises(ValueError, match=r"\.yaml or \.yml"):
        DataModule.load_from_checkpoint(path, hparams_file=tmp_path / "hp.csv")


def test_name_and_on_exception_exist_as_in_lightning() -> None:
    class Named(DataModule):
        name = "digits"

    assert DataModule.name is None and Named().name == "digits"
    assert DataModule().on_exception(RuntimeError("x")) is None


def test_our_checkpoint_rebuilds_the_datamodule_as_lightnings_does(tmp_path: Path) -> None:
    ours_module = _load(PROJECT, "dm_save_ours_again")
    path = tmp_path / "ours.ckpt"
    ours_module.save(path)
    assert torch.load(path, weights_only=True)["datamodule_hyper_parameters"] == {"batch_size": 4, "scale": 0.5}
    rebuilt = ours_module.Data.load_from_checkpoint(path)
    assert dict(rebuilt.hparams) == {"batch_size": 4, "scale": 0.5} and rebuilt.seen == 2
    lightning = pytest.importorskip("lightning")
    twin = _load(_twin(PROJECT), "dm_load_theirs").Data.load_from_checkpoint(path)
    assert isinstance(twin, lightning.pytorch.LightningDataModule) and dict(twin.hparams) == dict(rebuilt.hparams)
