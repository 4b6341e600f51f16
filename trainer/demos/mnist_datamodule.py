"""MNIST and its DataModule, as Lightning's demo defines them
(`lightning.pytorch.demos.mnist_datamodule`): the same files, splits, loaders and pixel values,
so a project written with them trains to Lightning's weights.

`MNIST(root, train=True, normalize=(0.1307, 0.3081), download=True)` reads Lightning's hosted
copy: `<root>/MNIST/complete/training.pt` and `test.pt`, each a `torch.save`d pair
`(images, labels)` (uint8 `N x 28 x 28`, int64 `N`). An item is `(image, label)`: the image a
float `1 x 28 x 28` tensor of the raw pixel values (0-255) less `normalize[0]`, divided by
`normalize[1]` (`normalize=None`: raw values). With `download=True` missing files are fetched
first; offline, put both files there yourself.

With torchvision installed (and the `PL_USE_MOCKED_MNIST` environment variable unset or empty),
`MNIST(...)` is torchvision's dataset and the DataModule adds torchvision's `ToTensor` (and
`Normalize` with `normalize=True`), as Lightning does. Without torchvision this reads the
hosted copy, where Lightning stops with an import error unless `PL_USE_MOCKED_MNIST` is set.

Example:
    >>> MNISTDataModule(data_dir="data", num_workers=0).num_classes
    10
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import urllib.request
import warnings
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from trainer.datamodule import DataModule

__all__ = ["MNIST", "MNISTDataModule"]

_DATASETS_PATH = "./data"
_log = logging.getLogger(__name__)


def _torchvision_available() -> bool:
    return importlib.util.find_spec("torchvision") is not None


class _MNIST(Dataset):
    """Lightning's hosted MNIST files read as tensors (no torchvision needed); see the module's doc."""

    RESOURCES = (
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/training.pt",
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/test.pt",
    )
    TRAIN_FILE_NAME = "training.pt"
    TEST_FILE_NAME = "test.pt"
    cache_folder_name = "complete"

    def __init__(self, root: str | Path, train: bool = True, normalize: tuple | None = (0.1307, 0.3081),
                 download: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.root = root
        self.train = train
        self.normalize = normalize
        self.prepare_data(download)
        name = self.TRAIN_FILE_NAME if train else self.TEST_FILE_NAME
        self.data, self.targets = self._load(os.path.join(self.cached_folder_path, name))

    def __getitem__(self, idx: int) -> tuple[Tensor, int]:
        image = self.data[idx].float().unsqueeze(0)
        if self.normalize is not None and len(self.normalize) == 2:
            image = self.normalize_tensor(image, *self.normalize)
        return image, int(self.targets[idx])

    def __len__(self) -> int:
        return len(self.data)

    @property
    def cached_folder_path(self) -> str:
        return os.path.join(self.root, "MNIST", self.cache_folder_name)

    def _check_exists(self, data_folder: str) -> bool:
        return all(os.path.isfile(os.path.join(data_folder, name)) for name in (self.TRAIN_FILE_NAME, self.TEST_FILE_NAME))

    def prepare_data(self, download: bool = True) -> None:
        """Fetch the two files when asked and missing; raise when they are still missing."""
        folder = self.cached_folder_path
        if self._check_exists(folder):
            return
        reason = "download=False"
        if download:
            try:
                self._download(folder)
                return
            except OSError as error:
                reason = f"the download failed: {error}"
        raise RuntimeError(
            f"MNIST found no data in {folder} ({reason}). Expected the files {self.TRAIN_FILE_NAME} and "
            f"{self.TEST_FILE_NAME} there, each a torch.save'd pair (uint8 images N x 28 x 28, int64 labels N). "
            f"Fix: copy them from {self.RESOURCES[0].rsplit('/', 1)[0]}/ into that folder (or save your own pair "
            "with torch.save), or pass the folder holding `MNIST/complete/` as the root (`data_dir=`)."
        )

    def _download(self, data_folder: str) -> None:
        os.makedirs(data_folder, exist_ok=True)
        for url in self.RESOURCES:
            target = os.path.join(data_folder, os.path.basename(url))
            if os.path.isfile(target):
                continue
            _log.info("Downloading %s", url)
            partial = target + ".part"
            with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as file:  # noqa: S310
                file.write(response.read())
            os.replace(partial, target)

    @staticmethod
    def _load(path: str) -> tuple[Tensor, Tensor]:
        try:
            images, labels = torch.load(path, weights_only=True)
        except Exception as error:
            raise RuntimeError(
                f"Could not read MNIST's {path}: {error}. Expected a torch.save'd pair (uint8 images N x 28 x 28, "
                "int64 labels N). Fix: delete the file and download it again, or save such a pair there."
            ) from error
        return images, labels

    @staticmethod
    def normalize_tensor(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
        """`(tensor - mean) / std`, with `mean` and `std` made tensors of the input's dtype and device."""
        mean_t = torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device)
        std_t = torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device)
        return tensor.sub(mean_t).div(std_t)


def MNIST(*args: Any, **kwargs: Any) -> Dataset:
    """torchvision's MNIST where Lightning's demo uses it (torchvision installed and
    `PL_USE_MOCKED_MNIST` unset or empty), else the hosted copy read as tensors; the arguments
    are the dataset's (`root`, `train`, `download`, ...)."""
    if not os.getenv("PL_USE_MOCKED_MNIST", "") and _torchvision_available():
        from torchvision.datasets import MNIST as TorchvisionMNIST  # type: ignore[import-not-found,unused-ignore]

        return TorchvisionMNIST(*args, **kwargs)
    return _MNIST(*args, **kwargs)


class MNISTDataModule(DataModule):
    """MNIST's training set split into `len - val_split` training and `val_split` validation
    images (a generator seeded with 42, whatever `seed` says, as in Lightning), and its test set;
    every loader drops its last partial batch and pins memory, the training one shuffles.

    Args:
        data_dir: the folder holding (or receiving) `MNIST/`.
        val_split: how many training images go to validation.
        num_workers: loader workers (0 on Windows, with a warning).
        normalize: with torchvision, normalise to mean 0.5, std 0.5 after `ToTensor`.
        seed: kept as an attribute (the split's generator uses 42).
        batch_size: the loaders' batch size.
    """

    name = "mnist"

    def __init__(self, data_dir: str = _DATASETS_PATH, val_split: int = 5000, num_workers: int = 16,
                 normalize: bool = False, seed: int = 42, batch_size: int = 32) -> None:
        super().__init__()
        if num_workers and sys.platform == "win32":
            warnings.warn(f"num_workers={num_workers} was asked for on Windows, where 0 is recommended; using 0.")
            num_workers = 0
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def prepare_data(self) -> None:
        """Make sure both splits are in `data_dir` (downloading them when missing)."""
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str) -> None:
        """Split the training set into the training and validation sets."""
        dataset = MNIST(self.data_dir, train=True, download=False, **self._transform())
        assert isinstance(dataset, Sized)
        self.dataset_train, self.dataset_val = random_split(
            dataset, [len(dataset) - self.val_split, self.val_split], generator=torch.Generator().manual_seed(42))

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
                          drop_last=True, pin_memory=True)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(MNIST(self.data_dir, train=False, download=False, **self._transform()), shuffle=False)

    def _transform(self) -> dict[str, Any]:
        transform = self.default_transforms
        return {"transform": transform} if transform else {}

    @property
    def default_transforms(self) -> Callable | None:
        """torchvision's `ToTensor` (then `Normalize(0.5, 0.5)` with `normalize=True`); None without torchvision."""
        if not _torchvision_available():
            return None
        from torchvision import transforms  # type: ignore[import-not-found,unused-ignore]

        if self.normalize:
            return transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean=(0.5,), std=(0.5,))])
        return transforms.ToTensor()
