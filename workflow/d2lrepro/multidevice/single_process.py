"""The book's own multi-GPU code, as written: one process driving several GPUs
(``mgpu.2gpu.book``, ``mgpuc.2gpu.book``).

From scratch, each minibatch is split with ``nn.parallel.scatter``, every device keeps a copy
of the parameters, the gradients are summed by the book's ``allreduce`` and each copy takes the
same SGD step. The concise version wraps ResNet-18 in ``nn.DataParallel``. Both need two or
more CUDA devices; the from-scratch loop also accepts CPU devices, so its logic is testable
anywhere.

:func:`_epochs` is the loop of this code path, the book's, kept as written to be compared with
ours: a new experiment on several devices reuses the worker's loop
(:func:`d2lrepro.multidevice.parts.worker.train`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pandas as pd

from d2lrepro.core import shortfall
from d2lrepro.core.results import (
    HISTORY_COLUMNS,
    diverged,
    write_csv,
    write_metrics,
    write_not_applicable,
)

if TYPE_CHECKING:
    import torch

    from d2lrepro.core.data import Data

log = logging.getLogger(__name__)


def allreduce(data: list[torch.Tensor]) -> None:
    """The book's ``allreduce``: sum every tensor into ``data[0]``, then copy the sum back to
    each one, in place; the tensors may live on different devices."""
    for tensor in data[1:]:
        data[0][:] += tensor.to(data[0].device)
    for tensor in data[1:]:
        tensor[:] = data[0].to(tensor.device)


def scatter(X: torch.Tensor, devices: list[torch.device]) -> list[torch.Tensor]:
    """``nn.parallel.scatter`` on CUDA devices; on others the same contiguous, nearly equal
    row chunks (``torch.tensor_split``: the first ones one row longer), copied."""
    # Here and in the functions below that train, not at the top: they import torch, which the
    # summary's job does not need.
    import torch
    from torch import nn

    if all(d.type == "cuda" for d in devices):
        return list(nn.parallel.scatter(X, devices))
    return [chunk.to(d) for chunk, d in zip(torch.tensor_split(X, len(devices)), devices)]


def split_batch(
    X: torch.Tensor, y: torch.Tensor, devices: list[torch.device]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The book's ``split_batch``: ``X`` and ``y`` scattered over ``devices``."""
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows, y has {y.shape[0]}")
    return scatter(X, devices), scatter(y, devices)


def _epochs(
    data: Data,
    devices,
    epochs: int,
    batch_size: int,
    seed: int,
    step,
    evaluate,
    model: str,
    lr: float,
):
    """The book's train loop, the loop of its single-process code path: timed epochs
    (evaluation excluded) of ``step(X, y)``, which returns the batch's summed loss and hits as
    tensors on the first device: they are summed there and read once per epoch, so no step
    waits for the GPUs (the book reads none)."""
    import torch

    from d2lrepro.core.devices import describe
    from d2lrepro.core.timing import Clock

    generator = torch.Generator().manual_seed(seed)
    rows = []
    for epoch in range(1, epochs + 1):
        order = torch.randperm(len(data.train_y), generator=generator)
        sums = torch.zeros(2, dtype=torch.float64, device=devices[0])
        with Clock(*devices) as clock:
            for i in range(0, len(order), batch_size):
                idx = order[i : i + batch_size]
                loss, hits = step(data.train_x[idx], data.train_y[idx])
                sums += torch.stack([loss.double(), hits.double()])
        seconds = clock.seconds
        loss_sum, correct = sums.tolist()
        n = len(order)
        rows.append(
            {
                "epoch": epoch,
                "train_loss": loss_sum / n,
                "train_acc": correct / n,
                "test_acc": evaluate(),
                "seconds": seconds,
                "samples_per_s": n / seconds,
                "devices": describe(devices),
                "world_size": 1,
                "model": model,
                "batch_size": batch_size,
                "lr": lr,
                "diverged": diverged([r["train_loss"] for r in rows] + [loss_sum / n]),
            }
        )
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def train_scratch(
    data: Data, devices: list[torch.device], epochs: int, batch_size: int, lr: float, seed: int = 0
) -> pd.DataFrame:
    """The book's from-scratch multi-GPU LeNet: per-device parameter copies and allreduce."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from d2lrepro.core import models
    from d2lrepro.core.data import evaluate_accuracy
    from d2lrepro.multidevice.parts.allreduce_by_hand import get_params

    params = models.lenet_params(seed)
    copies = [get_params(params, d) for d in devices]

    def step(X, y):
        shards_x, shards_y = split_batch(X, y, devices)
        y_hats = [models.lenet_forward(x, W) for x, W in zip(shards_x, copies)]
        losses = [
            F.cross_entropy(y_hat, t, reduction="none").sum() for y_hat, t in zip(y_hats, shards_y)
        ]
        for loss in losses:
            loss.backward()
        with torch.no_grad():
            for i in range(len(params)):
                allreduce([W[i].grad for W in copies])
            for W in copies:
                for p in W:
                    p -= lr * p.grad / len(X)
                    p.grad.zero_()
        first = devices[0]
        hits = sum((y_hat.argmax(1) == t).sum().to(first) for y_hat, t in zip(y_hats, shards_y))
        return sum(loss.detach().to(first) for loss in losses), hits

    class FirstCopy(nn.Module):
        def forward(self, X):
            return models.lenet_forward(X, copies[0])

    def evaluate():
        return evaluate_accuracy(
            FirstCopy(), data.test_x.to(devices[0]), data.test_y.to(devices[0]), batch_size
        )

    return _epochs(data, devices, epochs, batch_size, seed, step, evaluate, "lenet", lr)


def train_concise(
    data: Data, devices: list[torch.device], epochs: int, batch_size: int, lr: float, seed: int = 0
) -> pd.DataFrame:
    """The book's concise multi-GPU ResNet-18: ``nn.DataParallel`` over ``devices`` (CUDA)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from d2lrepro.core import models
    from d2lrepro.core.data import evaluate_accuracy

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = models.resnet18()
    models.init_normal_(net, seed)
    net = nn.DataParallel(net.to(devices[0]), device_ids=devices)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)

    def step(X, y):
        X, y = X.to(devices[0]), y.to(devices[0])
        optimizer.zero_grad()
        y_hat = net(X)
        loss = F.cross_entropy(y_hat, y)
        loss.backward()
        optimizer.step()
        return loss.detach() * len(y), (y_hat.argmax(1) == y).sum()

    def evaluate():
        return evaluate_accuracy(
            net, data.test_x.to(devices[0]), data.test_y.to(devices[0]), batch_size
        )

    return _epochs(data, devices, epochs, batch_size, seed, step, evaluate, "resnet18", lr)


def run_book(runs: dict, seed: int, data_path, outputs: dict, planned_gpus: int | None = None):
    """The book's one-process code for each run of ``runs`` (by name, e.g. ``lenet.2``: the
    settings of that multi-device run, on as many GPUs), written to ``outputs[name]``, or why
    it cannot run here. 1 and 2 GPUs both run the book's code, so their times compare like
    with like. ``planned_gpus``: the GPUs the run's plan gave the job where it found it short
    of some (None: the plan found no shortfall); with 0 none of the runs can run, and nothing
    starts torch."""
    if planned_gpus == 0:
        for name, run in runs.items():
            _cannot_run(outputs[name], shortfall.reason(cuda=run["devices"]))
        return
    import torch

    from d2lrepro.core.data import load_data
    from d2lrepro.core.devices import unavailable

    for name, run in runs.items():
        reason = unavailable(cuda=run["devices"])
        if reason:
            _cannot_run(outputs[name], reason)
            continue
        devices = [torch.device("cuda", i) for i in range(run["devices"])]
        data = load_data(data_path, run.get("train_subset"), run.get("test_subset"))
        train = train_scratch if run["model"] == "lenet" else train_concise
        history = train(data, devices, run["epochs"], run["batch_size"], run["lr"], seed)
        for row in history.itertuples():
            log.info(
                "%s epoch %d: train loss %.4f, test acc %.4f, %.2f s",
                name,
                row.epoch,
                row.train_loss,
                row.test_acc,
                row.seconds,
            )
        write_csv(history, outputs[name])


def summarize(files: list, metrics_out, book: pd.DataFrame) -> None:
    """The metrics of the book's one-process runs (``files``: one history CSV per run, named
    after it), each run's and each pair's, 2 devices over 1, beside the book's curves
    (``book``); their runs are drawn beside the data-parallel ones
    (:func:`d2lrepro.multidevice.data_parallel.summarize`)."""
    from d2lrepro.multidevice.parts import run_results  # only in the job that summarizes

    histories = run_results.load_runs(run_results.book_code_runs(files))
    write_metrics(run_results.metrics(histories, book), metrics_out)


def _cannot_run(output, why: str) -> None:
    """Write to ``output`` that the book's one-process path cannot run here, and ``why``."""
    write_not_applicable(output, f"the book's one-process path {why}")
