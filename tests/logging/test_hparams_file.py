"""`hparams.yaml` beside TensorBoard's event files, as Lightning's TensorBoardLogger keeps it, and
`load_from_checkpoint(..., hparams_file=)` reading Lightning's file or ours, compared with Lightning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset


def module_class(pkg: Any) -> type:
    class Net(pkg.LightningModule):
        def __init__(self, hidden: int = 3, lr: float = 0.1, name: str = "net") -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(2, hidden)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return Net


def run(pkg: Any, root: Path) -> tuple[type, Any]:
    torch.manual_seed(0)
    net = module_class(pkg)(hidden=4, lr=0.05, name="first")
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = pkg.Trainer(max_epochs=1, logger=pkg.loggers.TensorBoardLogger(str(root)), enable_progress_bar=False,
                          enable_model_summary=False, default_root_dir=str(root))
    trainer.fit(net, loader)
    return type(net), trainer


def test_tensorboard_keeps_hparams_yaml_beside_its_events(tmp_path: Path) -> None:
    import trainer as ours

    _, trainer = run(ours, tmp_path)
    folder = Path(trainer.logger.log_dir)
    assert any(folder.glob("*tfevents*"))
    params = yaml.safe_load((folder / "hparams.yaml").read_text())
    assert params["module"] == {"hidden": 4, "lr": 0.05, "name": "first"}
    assert params["trainer"]["max_epochs"] == 1


def test_hparams_file_replaces_the_saved_hyperparameters_as_in_lightning(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    import lightning.pytorch as lightning

    import trainer as ours

    net_class, trainer = run(ours, tmp_path / "ours")
    lightning_class, lightning_trainer = run(lightning, tmp_path / "lightning")
    ckpt = str(Path(trainer.log_dir) / "last.ckpt")  # no ModelCheckpoint by default here: the run's last.ckpt
    lightning_ckpt = lightning_trainer.checkpoint_callback.best_model_path
    our_file = Path(trainer.logger.log_dir) / "hparams.yaml"
    lightning_file = Path(lightning_trainer.logger.log_dir) / "hparams.yaml"
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump({"hidden": 4, "lr": 0.5, "name": "edited"}))

    expected = lightning_class.load_from_checkpoint(lightning_ckpt, hparams_file=str(lightning_file))
    for file in (our_file, lightning_file):  # ours (nested, the module's part is read) and Lightning's
        loaded = net_class.load_from_checkpoint(ckpt, hparams_file=str(file))
        assert dict(loaded.hparams) == dict(expected.hparams) == {"hidden": 4, "lr": 0.05, "name": "first"}
    ours_edited = net_class.load_from_checkpoint(ckpt, None, str(edited), name="kwarg")  # Lightning's positions
    theirs_edited = lightning_class.load_from_checkpoint(lightning_ckpt, None, str(edited), name="kwarg")
    assert dict(ours_edited.hparams) == dict(theirs_edited.hparams) == {"hidden": 4, "lr": 0.5, "name": "kwarg"}
    for key, value in expected.state_dict().items():  # the same run trained to the same weights
        assert torch.equal(value, loaded.state_dict()[key])


def test_hparams_file_that_is_not_yaml_names_what_to_write(tmp_path: Path) -> None:
    import trainer as ours

    net_class, trainer = run(ours, tmp_path)
    tags = tmp_path / "tags.csv"
    tags.write_text("key,value\nlr,0.1\n")
    with pytest.raises(ValueError, match=r"hparams_file=.*tags\.csv.*expected a \.yaml or \.yml file"):
        net_class.load_from_checkpoint(str(Path(trainer.log_dir) / "last.ckpt"), hparams_file=str(tags))
