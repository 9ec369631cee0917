"""The lr-scheduler section's LeNet and a fast in-memory training loop.

The loop follows the book's ``train()`` (SGD without momentum, mean cross-entropy, the
epoch's running train loss/accuracy, test accuracy after each epoch) but keeps the data as
tensors on the device and draws minibatches from a seeded permutation instead of going
through a ``DataLoader``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import pandas as pd
import torch
from torch import nn

from .environment import synchronize

COLUMNS = ["epoch", "lr", "train_loss", "train_acc", "test_acc", "seconds", "samples_per_s", "diverged"]
EVAL_BATCH = 4096
DIVERGENCE_CHECK_EVERY = 20  # batches between (synchronizing) checks for a non-finite loss


def lenet(seed: int | None = 0) -> nn.Sequential:
    """The section's LeNet (ReLU, max pooling), PyTorch default init drawn under ``seed``.

    The global RNG is left as it was; ``seed=None`` draws from it instead.
    """

    def build() -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10),
        )

    if seed is None:
        return build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


@dataclass
class Data:
    """Images as float32 ``(N, 1, 28, 28)`` in [0, 1] (the book's ``ToTensor``), labels as int64."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def device(self) -> torch.device:
        return self.train_x.device

    def to(self, device) -> "Data":
        device = torch.device(device)
        if self.train_x.device == device and self.test_x.device == device:
            return self
        return Data(*(t.to(device) for t in (self.train_x, self.train_y, self.test_x, self.test_y)))

    def subset(self, train: int | None = None, test: int | None = None) -> "Data":
        """The first ``train`` training and ``test`` test examples (``None``: all)."""
        return Data(self.train_x[:train], self.train_y[:train], self.test_x[:test], self.test_y[:test])


def _images(images: torch.Tensor) -> torch.Tensor:
    if images.dim() == 3:
        images = images.unsqueeze(1)
    if images.dtype == torch.uint8:
        return images.to(torch.float32).div_(255)
    return images.to(torch.float32)


def prepare_data(raw: Mapping[str, torch.Tensor] | Data, train_subset: int | None = None,
                 test_subset: int | None = None, device="cpu") -> Data:
    """Turn the prepared dict (``train_images``, ``train_labels``, ``test_images``, ``test_labels``;
    uint8 images ``(N, 28, 28)``) into :class:`Data` on ``device``, keeping the first
    ``train_subset``/``test_subset`` examples. Conversion happens once, after subsetting."""
    if isinstance(raw, Data):
        return raw.subset(train_subset, test_subset).to(device)
    data = Data(
        _images(raw["train_images"][:train_subset]),
        raw["train_labels"][:train_subset].to(torch.int64),
        _images(raw["test_images"][:test_subset]),
        raw["test_labels"][:test_subset].to(torch.int64),
    )
    return data.to(device)


def load_data(path, train_subset: int | None = None, test_subset: int | None = None, device="cpu") -> Data:
    """:func:`prepare_data` of a ``torch.save``'d dict such as ``results/data/fashion_mnist.pt``."""
    return prepare_data(torch.load(path, weights_only=True), train_subset, test_subset, device)


@torch.no_grad()
def evaluate_accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = EVAL_BATCH) -> float:
    """Fraction of ``x`` classified as ``y``, in eval mode; the net's mode is restored."""
    if len(y) == 0:
        return math.nan
    was_training = net.training
    net.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for i in range(0, len(y), batch_size):
        correct += (net(x[i:i + batch_size]).argmax(dim=1) == y[i:i + batch_size]).sum()
    net.train(was_training)
    return correct.item() / len(y)


def train(net: nn.Module, data: Data | Mapping[str, torch.Tensor], epochs: int, lr_per_epoch: Sequence[float],
          batch_size: int = 256, device="cpu", seed: int = 0, log: logging.Logger | None = None,
          on_epoch: Callable[[dict], None] | None = None, train_subset: int | None = None,
          test_subset: int | None = None) -> pd.DataFrame:
    """Train ``net`` in place with minibatch SGD; one row per epoch (see :data:`COLUMNS`).

    Before epoch ``e`` (0-based) every param group's lr is set to ``lr_per_epoch[e]``.
    Each epoch visits the training set in the order of a permutation drawn from a
    ``torch.Generator`` seeded with ``seed``; the last partial batch is kept.
    ``train_loss``/``train_acc`` are the means over the epoch's examples of the per-batch
    values seen during training (the book's running metrics); ``test_acc`` is measured after
    the epoch in eval mode; ``seconds`` covers the training pass only.
    A non-finite training loss ends the run: that epoch's row has ``diverged`` True and
    ``test_acc`` NaN, and no later epochs are run (``df.attrs["diverged"]`` says whether this
    happened). ``on_epoch(row)`` is called with each row as a dict.
    """
    if len(lr_per_epoch) < epochs:
        raise ValueError(f"{epochs} epochs need {epochs} learning rates, got {len(lr_per_epoch)}")
    device = torch.device(device)
    data = prepare_data(data, train_subset, test_subset, device)
    n = len(data.train_y)
    if n == 0:
        raise ValueError("no training examples")
    net.to(device)
    net.train()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=float(lr_per_epoch[0]) if epochs else 0.0)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    diverged = False
    for epoch in range(epochs):
        lr = float(lr_per_epoch[epoch])
        for group in optimizer.param_groups:
            group["lr"] = lr
        net.train()
        synchronize(device)
        start = time.perf_counter()
        order = torch.randperm(n, generator=generator).to(device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = 0
        for b, i in enumerate(range(0, n, batch_size)):
            idx = order[i:i + batch_size]
            x, y = data.train_x[idx], data.train_y[idx]
            optimizer.zero_grad(set_to_none=True)
            y_hat = net(x)
            loss = loss_fn(y_hat, y)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                loss_sum += loss.detach().double() * len(y)
                correct += (y_hat.argmax(dim=1) == y).sum()
            seen += len(y)
            if (b + 1) % DIVERGENCE_CHECK_EVERY == 0 and not torch.isfinite(loss_sum).item():
                diverged = True
                break
        synchronize(device)
        seconds = time.perf_counter() - start
        train_loss = loss_sum.item() / seen
        diverged = diverged or not math.isfinite(train_loss)
        row = {
            "epoch": epoch + 1,
            "lr": lr,
            "train_loss": train_loss,
            "train_acc": correct.item() / seen,
            "test_acc": math.nan if diverged else evaluate_accuracy(net, data.test_x, data.test_y),
            "seconds": seconds,
            "samples_per_s": seen / seconds if seconds > 0 else math.nan,
            "diverged": diverged,
        }
        rows.append(row)
        if log is not None:
            log.info("epoch %d/%d lr %.4g: train loss %.4f, train acc %.4f, test acc %.4f, "
                     "%.2f s (%.0f examples/s)%s", row["epoch"], epochs, lr, row["train_loss"],
                     row["train_acc"], row["test_acc"], seconds, row["samples_per_s"],
                     " DIVERGED" if diverged else "")
        if on_epoch is not None:
            on_epoch(row)
        if diverged:
            break
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["diverged"] = diverged
    return frame


__all__ = ["COLUMNS", "lenet", "Data", "prepare_data", "load_data", "evaluate_accuracy", "train"]
