"""intermediate_source/torchvision_tutorial.py ("TorchVision Object Detection Finetuning"), its
training as torchvision's detection `engine.train_one_epoch` runs it (`original`), and a port
to a LightningModule (`main`), written with this package's imports so that `load_file` runs it
under Lightning too.

The tutorial: a detector that returns a dict of losses in train mode and predictions in eval
mode, images of different sizes batched as tuples (`collate_fn = tuple(zip(*batch))`), SGD with
momentum and weight decay over the parameters that require grad, a `StepLR` stepped after each
epoch, and in epoch 0 a `LinearLR` warm-up built when the epoch starts and stepped after every
batch; with a GradScaler (the engine's `scaler` argument) each step is
`scaler.scale(losses).backward(); scaler.step(optimizer); scaler.update()`, and the warm-up
is stepped whether or not the scaler skipped the step.

The port: `training_step` returns the sum of the loss dict; `configure_optimizers` returns
the optimizer with both schedulers (the warm-up at `interval="step"`, built after the
`StepLR` as in the tutorial; past its `total_iters` a `LinearLR` leaves the rate as it is, so
stepping it in later epochs changes nothing); `predict_step` gives the test images'
predictions. `warmup_every_batch=True` steps the warm-up from `on_train_batch_end` instead
(`lr_scheduler_step` does nothing for it), on every batch, as the engine does when amp skips
a step (the Trainer steps its schedulers only after real steps).

Differences from the tutorial, with no download: Mask R-CNN (torchvision) is replaced by a
small detector with the same interface (a convolution, pooling, a class and a box head; one
object per image), the Penn-Fudan images by 8 random images of 12 to 16 pixels a side with a
box and a label each; 2 epochs; COCO evaluation is replaced by the predictions on the test
images.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainer as L

EPOCHS = 2


class TinyDetector(nn.Module):
    """A detector with Mask R-CNN's interface: `model(images, targets)` -> loss dict (train),
    `model(images)` -> a list of {"boxes", "labels", "scores"} (eval)."""

    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.cls_score = nn.Linear(16, num_classes)
        self.bbox_pred = nn.Linear(16, 4)

    def forward(self, images: list[torch.Tensor], targets: list[dict[str, torch.Tensor]] | None = None) -> Any:
        features = torch.cat([self.backbone(image.unsqueeze(0)) for image in images])
        logits, boxes = self.cls_score(features), self.bbox_pred(features)
        if self.training:
            assert targets is not None
            labels = torch.cat([t["labels"] for t in targets])
            gt_boxes = torch.cat([t["boxes"] for t in targets])
            return {"loss_classifier": F.cross_entropy(logits, labels), "loss_box_reg": F.smooth_l1_loss(boxes, gt_boxes)}
        scores = logits.softmax(-1)
        return [{"boxes": b[None], "labels": s.argmax()[None], "scores": s.max()[None]} for b, s in zip(boxes, scores)]


def dataset(n: int, seed: int) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(n):
        h, w = (int(v) for v in torch.randint(12, 17, (2,), generator=g))
        x0, y0 = (float(v) for v in torch.rand(2, generator=g) * 6)
        items.append((torch.rand(3, h, w, generator=g),
                      {"boxes": torch.tensor([[x0, y0, x0 + 5.0, y0 + 5.0]]), "labels": torch.randint(0, 2, (1,), generator=g)}))
    return items


def collate_fn(batch: Any) -> tuple[Any, ...]:
    return tuple(zip(*batch))


def data_loader() -> DataLoader:
    return DataLoader(dataset(8, seed=1), batch_size=2, shuffle=True, collate_fn=collate_fn)  # type: ignore[arg-type]


def test_images() -> list[torch.Tensor]:
    return [image for image, _ in dataset(3, seed=2)]


class DetectionPort(L.LightningModule):
    def __init__(self, warmup_iters: int, warmup_every_batch: bool = False) -> None:
        super().__init__()
        self.model = TinyDetector()
        self.warmup_iters = warmup_iters
        self.warmup_every_batch = warmup_every_batch

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, targets = batch
        loss_dict = self.model(list(images), list(targets))
        return sum(loss for loss in loss_dict.values())  # type: ignore[return-value]

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return self.model([batch])[0]

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=0.005, momentum=0.9, weight_decay=0.0005)
        lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.1)
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0 / 1000, total_iters=self.warmup_iters)
        return [optimizer], [{"scheduler": warmup, "interval": "step"}, {"scheduler": lr_scheduler, "interval": "epoch"}]

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        if not (self.warmup_every_batch and isinstance(scheduler, torch.optim.lr_scheduler.LinearLR)):
            scheduler.step()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.warmup_every_batch:
            self.lr_schedulers()[0].step()  # type: ignore[index]


def original(precision: str = "fp32", init_scale: float = 2.0**16, epochs: int = EPOCHS) -> tuple[TinyDetector, list[Any], Any]:
    """The tutorial's main loop with torchvision's `train_one_epoch` (its metric logging left out)."""
    torch.manual_seed(0)
    model = TinyDetector()
    loader = data_loader()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.005, momentum=0.9, weight_decay=0.0005)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale) if precision == "amp" else None
    warmups = []
    for epoch in range(epochs):
        model.train()
        warmup = None
        if epoch == 0:
            warmup_factor = 1.0 / 1000
            warmup_iters = min(1000, len(loader) - 1)
            warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=warmup_factor, total_iters=warmup_iters)
            warmups.append(warmup)
        for images, targets in loader:
            images = list(image for image in images)
            targets = [{k: v for k, v in t.items()} for t in targets]
            with torch.autocast("cpu", dtype=torch.float16, enabled=scaler is not None):
                loss_dict = model(images, targets)
                losses = sum(loss for loss in loss_dict.values())
            optimizer.zero_grad()
            if scaler is not None:
                scaler.scale(losses).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                losses.backward()  # type: ignore[union-attr]
                optimizer.step()
            if warmup is not None:
                warmup.step()
        lr_scheduler.step()
    model.eval()
    with torch.no_grad():
        predictions = [model([image])[0] for image in test_images()]
    return model, predictions, warmups[0]


def main(epochs: int = EPOCHS, warmup_every_batch: bool = False, **options: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    port = DetectionPort(min(1000, len(data_loader()) - 1), warmup_every_batch)
    loader = data_loader()
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", **options)
    trainer.fit(port, loader)
    predictions = trainer.predict(port, DataLoader(test_images(), batch_size=None))  # type: ignore[arg-type]
    return {"model": port.model, "trainer": trainer, "predictions": predictions,
            "warmup": trainer.lr_scheduler_configs[0].scheduler}
