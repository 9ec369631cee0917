"""Benchmark: the speed of LeNet training on the CPU, measured side by side in one run:

1. our data path (Fashion-MNIST in memory as tensors, batches by index) against the book's
   (a torchvision-style dataset: one PIL image per sample, ToTensor, a DataLoader with 4
   workers), with the same network, batch size, learning rate and thread count;
2. one training process against two (the from-scratch data-parallel LeNet of the multi-device
   section, each process pinned to its own core).

    .venv/bin/python tests/speed.py [--data results/data/fashion_mnist.pt]

Prints the share of the epoch spent waiting for data, the speed-up over the book's loop and
the 2-process scaling; it asserts nothing. Run by hand, outside the workflow: it serves no
ledger id.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

from d2lrepro.core.data import Data, prepare_data
from d2lrepro.core.models import lenet
from d2lrepro.multidevice.parts import launcher, worker


class BookFashionMNIST(Dataset):
    """What torchvision's FashionMNIST with transforms.ToTensor() does per sample."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        image = Image.fromarray(self.images[i].numpy(), mode="L")
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255).unsqueeze(0)
        return x, int(self.labels[i])


def book_batches(raw: dict, batch_size: int, workers: int, seed: int):
    dataset = BookFashionMNIST(raw["train_images"], raw["train_labels"])
    return DataLoader(
        dataset,
        batch_size,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(seed),
    )


def memory_batches(data: Data, batch_size: int, seed: int):
    order = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(seed))
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        yield data.train_x[idx], data.train_y[idx]


def timed_epoch(batches, lr: float, seed: int) -> dict:
    """One epoch of SGD on a fresh LeNet; seconds in all and seconds spent waiting for data.
    A benchmark of the book's loop (``book_batches``) against ours (``memory_batches``), not a
    loop to reuse: experiments train with :func:`d2lrepro.core.training.train`."""
    net = lenet(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    waiting, samples = 0.0, 0
    start = time.perf_counter()
    iterator = iter(batches)
    while True:
        before = time.perf_counter()
        batch = next(iterator, None)
        waiting += time.perf_counter() - before
        if batch is None:
            break
        x, y = batch
        optimizer.zero_grad()
        loss_fn(net(x), y).backward()
        optimizer.step()
        samples += len(y)
    total = time.perf_counter() - start
    return {"seconds": total, "data_seconds": waiting, "samples_per_s": samples / total}


def processes_samples_per_s(
    data_path: Path, devices: int, subset: int, batch_size: int, lr: float
) -> float:
    """Samples/s of one epoch of the multi-device section's LeNet on ``devices`` processes."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "history.csv"
        argv = [
            "--model",
            "lenet",
            "--epochs",
            "1",
            "--batch-size",
            str(batch_size),
            "--lr",
            str(lr),
            "--train-subset",
            str(subset),
            "--test-subset",
            "256",
            "--data",
            str(data_path),
            "--out",
            str(out),
        ]
        # A CPU benchmark: hide any GPU, so 1 and 2 processes are both pinned cores.
        env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
        command = launcher.command(worker, devices, argv)
        subprocess.run(command, check=True, capture_output=True, env=env)
        return float(pd.read_csv(out)["samples_per_s"].iloc[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("results/data/fashion_mnist.pt"))
    parser.add_argument("--train-subset", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--workers", type=int, default=4, help="the book's DataLoader workers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    raw = {
        k: v[: args.train_subset] if k.startswith("train") else v
        for k, v in torch.load(args.data).items()
    }
    ours = timed_epoch(
        memory_batches(prepare_data(raw), args.batch_size, args.seed), args.lr, args.seed
    )
    book = timed_epoch(
        book_batches(raw, args.batch_size, args.workers, args.seed), args.lr, args.seed
    )
    one, two = (
        processes_samples_per_s(args.data, n, args.train_subset, args.batch_size, args.lr)
        for n in (1, 2)
    )

    print(
        f"LeNet, {args.train_subset} training images, batch {args.batch_size},"
        f" {args.threads} threads"
    )
    for name, r in (("in-memory tensors", ours), (f"book loop ({args.workers} workers)", book)):
        print(
            f"  {name:28s} {r['seconds']:7.2f} s/epoch  {r['samples_per_s']:8.0f} samples/s  "
            f"data {r['data_seconds'] / r['seconds']:6.1%} of the epoch"
        )
    print(
        f"  epoch speed-up over the book's loop: {book['seconds'] / ours['seconds']:.2f}x"
        " (target >= 1.3x)"
    )
    print(f"  data share of our epoch: {ours['data_seconds'] / ours['seconds']:.1%} (target < 5%)")
    print(
        f"  data-parallel from scratch: 1 process {one:.0f} samples/s,"
        f" 2 processes {two:.0f} samples/s, "
        f"{two / one:.2f}x (target >= 1.8x)"
    )


if __name__ == "__main__":
    main()
