"""Lightning's basic transformer example (examples/pytorch/basics/transformer.py), small: the
shipped demo's `Transformer` language model and `WikiText2` text (`trainer.demos`; the twin
imports Lightning's demo package), split three ways with `random_split` on torch's
global generator, SGD, `gradient_clip_val=0.25`, the losses logged with `prog_bar=True`, fit
then test.

The download is replaced by a small text file written first (the format WikiText2 reads: one
sentence a line, the words over a 20-word vocabulary), read from `root_dir/data` rather than
`./data`; the split holds 4 and 4 blocks back for validation and test (the example: 2000 and
2000), batches of 4, two epochs (the example: 20).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split

import trainer as L
from trainer.demos import Transformer, WikiText2


class LanguageModel(L.LightningModule):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("val_loss", loss, prog_bar=True)
        return loss

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("test_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def write_text(folder: Path, lines: int = 45) -> None:
    generator = torch.Generator().manual_seed(7)
    words = torch.randint(20, (lines, 9), generator=generator).tolist()
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(" ".join(f"word{i}" for i in line) + "\n" for line in words)
    (folder / "wikitext-2.txt").write_text(text, encoding="utf8")


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    root = Path(root_dir)
    write_text(root / "data")
    L.seed_everything(42)

    dataset = WikiText2(data_dir=root / "data")
    n = len(dataset)
    train_dataset, val_dataset, test_dataset = random_split(dataset, [n - 8, 4, 4])
    train_dataloader = DataLoader(train_dataset, batch_size=4, shuffle=True)
    val_dataloader = DataLoader(val_dataset, batch_size=4, shuffle=False)
    test_dataloader = DataLoader(test_dataset, batch_size=4, shuffle=False)

    model = LanguageModel(vocab_size=dataset.vocab_size)
    trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=2, accelerator="cpu", precision=precision,
                        default_root_dir=root, enable_progress_bar=False)
    trainer.fit(model, train_dataloader, val_dataloader)
    val = dict(trainer.callback_metrics)
    test = trainer.test(model, test_dataloader, verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": val, "test": test, "batches": len(train_dataloader)}
