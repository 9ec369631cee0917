"""One data-parallel run on one or more devices, one process per device: the worker that
``torchrun`` starts for the multi-GPU sections (``mgpu.*``, ``mgpuc.*``;
:mod:`d2lrepro.multidevice.parts.launcher` starts it). Its :func:`train` is the loop of the
multi-device code path: a new experiment on several devices reuses it.

Run as ``python -m d2lrepro.multidevice.parts.worker --model lenet --data fashion_mnist.pt
--out lenet.csv`` (one worker), or under ``torchrun --standalone --nproc-per-node 2 -m
d2lrepro.multidevice.parts.worker ...``.
Without torchrun's environment (``WORLD_SIZE`` unset) no process group is created. Workers use
NCCL on GPUs and gloo on pinned CPU cores (see :mod:`d2lrepro.core.devices`).

Every worker walks the same seeded permutation of the training set; each global minibatch of
``--batch-size`` examples is split row-wise into one contiguous shard per worker, so the union
of the shards is a minibatch of one device. The initial parameters depend on ``--seed`` only,
the data order by default on the number of workers too (:func:`order_seed`): the book's 1- and
2-GPU runs start from the same parameters but each shuffles on its own. ``lenet`` is the
from-scratch section (:mod:`d2lrepro.multidevice.parts.allreduce_by_hand`), ``resnet18`` the
concise one (:mod:`d2lrepro.multidevice.parts.ddp`). Test accuracy is measured on rank 0 only
(the book evaluates on the first GPU), outside the timed part, as is the gap between the workers'
parameters at each epoch's end (``mgpu.2gpu.replicas``); rank 0 also writes the CSVs and the
checkpoint. The experiments whose workers measure without training
(:mod:`~d2lrepro.multidevice.cost_model`, :mod:`~d2lrepro.multidevice.parameter_server`) are
their own workers' programs; every worker joins its run through
:func:`~d2lrepro.multidevice.parts.process_group.joined`.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from d2lrepro.core.data import Data, evaluate_accuracy, load_checkpoint, load_data, save
from d2lrepro.core.devices import describe, devices_used, run_devices, world_size
from d2lrepro.core.results import HISTORY_COLUMNS, TOPK_COLUMNS, diverged, write_csv
from d2lrepro.core.timing import Clock, Stamps
from d2lrepro.multidevice.parts.allreduce_by_hand import replica_gap, scratch_setup, shard
from d2lrepro.multidevice.parts.ddp import concise_setup
from d2lrepro.multidevice.parts.process_group import joined

MODELS = ("lenet", "resnet18")
# Beside HISTORY_COLUMNS: an epoch's examples, its throughput on its whole batches after
# the first (:func:`steady_rate`) and that of each of them, space-separated
# (:func:`batch_rates`), how far the workers' parameters lie apart at its end
# (:func:`~d2lrepro.multidevice.parts.allreduce_by_hand.replica_gap`), and how many devices
# its workers ran on (:func:`~d2lrepro.core.devices.devices_used`: fewer than the workers
# where they shared GPUs).
RUN_COLUMNS = [
    *HISTORY_COLUMNS,
    "examples",
    "steady_samples_per_s",
    "batch_rates",
    "replica_gap",
    "devices_used",
]
log = logging.getLogger("d2lrepro.multidevice.parts.worker")


def build(
    model: str,
    seed: int,
    lr: float,
    device: torch.device,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
):
    """This worker's replica of ``model``, its optimizer (None for the from-scratch LeNet) and
    ``step(x, y, global_batch)``."""
    if model == "lenet":
        return scratch_setup(seed, lr, device)
    return concise_setup(seed, lr, device, momentum, weight_decay)


def order_seed(seed: int, world: int) -> int:
    """The default seed of the data order of a run of ``world`` workers: ``seed`` for one
    worker, another for each further one, so 1 and 2 devices see different minibatches."""
    return seed + 1000 * (world - 1)


def steady_rate(marks: list[tuple[float, int]]) -> float:
    """Examples per second from the end of an epoch's first batch to the end of its last whole
    one, given ``marks`` (seconds, examples done) at the end of each of these batches: warm-up,
    which would weigh more on a run of fewer batches, and a partial last batch, which runs at
    another rate, are left out. NaN without a whole batch after the first."""
    (t0, n0), (t1, n1) = marks[0], marks[-1]
    return (n1 - n0) / (t1 - t0) if n1 > n0 else math.nan


def batch_rates(marks: list[tuple[float, int]]) -> list[float]:
    """Examples per second of each whole batch after an epoch's first, from the ``marks`` of
    :func:`steady_rate`: the spread of a speed-up measured on one epoch comes from them."""
    return [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in zip(marks, marks[1:])]


def _reduced(counts: torch.Tensor) -> torch.Tensor:
    """The sum of ``counts`` over workers (valid on rank 0)."""
    total = counts.clone()
    if world_size() > 1:
        dist.reduce(total, dst=0)
    return total


def _config(args: argparse.Namespace, world: int) -> dict:
    """What a checkpoint must agree on to be resumed."""
    keys = ("model", "batch_size", "lr", "momentum", "weight_decay", "seed", "train_subset")
    order = order_seed(args.seed, world) if args.order_seed is None else args.order_seed
    return {**{k: getattr(args, k) for k in keys}, "world_size": world, "order_seed": order}


@dataclass
class Replica:
    """What a worker sets up before its first epoch and carries from epoch to epoch."""

    data: Data
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer | None  # None for the from-scratch LeNet
    step: Callable  # step(x, y, global_batch), see build
    generator: torch.Generator  # the data order
    config: dict  # what a checkpoint must agree on (_config)
    world: int
    devices: str  # the run's devices, in words
    devices_used: int  # how many devices its workers ran on (devices_used)


def _set_up(args: argparse.Namespace, device: torch.device) -> Replica:
    """The data on ``device``, this worker's replica of ``--model`` and the data order's
    generator (:func:`order_seed`)."""
    world = world_size()
    config = _config(args, world)
    return Replica(
        load_data(args.data, args.train_subset, args.test_subset, device),
        *build(args.model, args.seed, args.lr, device, args.momentum, args.weight_decay),
        torch.Generator().manual_seed(config["order_seed"]),
        config,
        world,
        describe(run_devices(world)),
        devices_used(run_devices(world)),
    )


def _resume(args: argparse.Namespace, replica: Replica) -> tuple[list, list, int]:
    """History, top-k rows and epochs done from ``args.checkpoint``, loaded into ``replica``;
    nothing if it is absent or cannot be read (:func:`~d2lrepro.core.data.load_checkpoint`
    sets it aside)."""
    state = load_checkpoint(args.checkpoint)
    if state is None:
        return [], [], 0
    if state["config"] != replica.config:
        raise ValueError(
            f"{args.checkpoint} was written by a run with {state['config']}, not {replica.config}"
        )
    if state["epoch"] > args.epochs:
        raise ValueError(
            f"{args.checkpoint} is at epoch {state['epoch']}, past --epochs {args.epochs}"
        )
    replica.net.load_state_dict(state["model"])
    if replica.optimizer is not None:
        replica.optimizer.load_state_dict(state["optimizer"])
    replica.generator.set_state(state["rng"])
    log.info("resuming from %s after epoch %d", args.checkpoint, state["epoch"])
    return state["history"], state["topk"], state["epoch"]


def train(args: argparse.Namespace, device: torch.device, rank: int) -> tuple[list, list]:
    """Train for ``args.epochs`` epochs, resuming from ``args.checkpoint`` if it exists: the
    loop of the multi-device code path.

    Returns (on rank 0; empty elsewhere) one row per epoch
    (:data:`RUN_COLUMNS`) and, with
    ``--topk-out``, a row every ``--topk-every`` batches with the running means since the
    epoch's start of loss, top-1 and top-5 training accuracy (:data:`TOPK_COLUMNS`).
    """
    replica = _set_up(args, device)
    history, topk_rows, done = _resume(args, replica)
    for epoch in range(done + 1, args.epochs + 1):
        if epoch == args.fail_at_epoch and rank == replica.world - 1:
            raise RuntimeError(f"rank {rank} fails at epoch {epoch} as asked (--fail-at-epoch)")
        order = torch.randperm(len(replica.data.train_y), generator=replica.generator)
        replica.net.train()
        measured = train_epoch(args, replica, order.to(device), rank, epoch, topk_rows)
        gap = replica_gap(replica.net.parameters())  # every worker, outside the timed part
        if rank == 0:
            history.append(_epoch_row(args, replica, history, epoch, measured, gap))
            _log_epoch(history[-1], args.epochs)
            _write_checkpoint(args, replica, epoch, history, topk_rows)
    return (history, topk_rows) if rank == 0 else ([], [])


def train_epoch(args, replica: Replica, order, rank: int, epoch: int, topk_rows: list):
    """Epoch ``epoch``, timed, over the examples in ``order``, this worker taking its shard of
    each minibatch: the loss sum, top-1 and top-5 hits and examples over every worker, the
    epoch's seconds and the marks of :func:`steady_rate`, stamped on the device's queue as
    each batch's work is queued (:class:`~d2lrepro.core.timing.Stamps`: no batch waits for
    its stamp). With ``--topk-out``, rank 0 adds a row to ``topk_rows`` every
    ``--topk-every`` batches (the running means so far)."""
    data, device, n = replica.data, order.device, len(order)
    # loss sum, top-1 hits, top-5 hits, examples
    counts = torch.zeros(4, dtype=torch.float64, device=device)
    marks = Stamps(device)  # at the end of the first batch and of each whole one after it
    with Clock(device) as clock:
        for batch, i in enumerate(range(0, n, args.batch_size), start=1):
            idx = order[i : i + args.batch_size]
            mine = shard(idx, rank, replica.world)
            y = data.train_y[mine]
            y_hat, loss = replica.step(data.train_x[mine], y, len(idx))
            hits = y_hat.topk(min(5, y_hat.shape[1]), dim=1).indices == y[:, None]
            counts[0] += loss
            counts[1] += hits[:, 0].sum()
            counts[2] += hits.any(dim=1).sum()
            counts[3] += len(y)
            if batch == 1 or len(idx) == args.batch_size:
                marks.stamp(i + len(idx))
            if args.topk_out is not None and batch % args.topk_every == 0:
                loss_sum, top1, top5, seen = _reduced(counts).tolist()
                if rank == 0:
                    topk_rows.append(
                        {
                            "epoch": epoch,
                            "batch": batch,
                            "train_loss": loss_sum / seen,
                            "top1": top1 / seen,
                            "top5": top5 / seen,
                        }
                    )
        totals = _reduced(counts).tolist()
    return totals, clock.seconds, marks.seconds()


def _epoch_row(args, replica: Replica, history: list, epoch: int, measured, gap: float) -> dict:
    """Rank 0's row (:data:`RUN_COLUMNS`) for epoch ``epoch``: what :func:`train_epoch`
    measured, the test accuracy and the gap between the replicas."""
    (loss_sum, top1, _, seen), seconds, marks = measured
    test_x, test_y = replica.data.test_x, replica.data.test_y
    return {
        "epoch": epoch,
        "train_loss": loss_sum / seen,
        "train_acc": top1 / seen,
        "test_acc": evaluate_accuracy(replica.net, test_x, test_y, args.batch_size),
        "seconds": seconds,
        "samples_per_s": seen / seconds,
        "examples": seen,
        "steady_samples_per_s": steady_rate(marks),
        "batch_rates": " ".join(f"{rate:.6g}" for rate in batch_rates(marks)),
        "replica_gap": gap,
        "devices_used": replica.devices_used,
        "devices": replica.devices,
        "world_size": replica.world,
        "model": args.model,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "diverged": diverged([h["train_loss"] for h in history] + [loss_sum / seen]),
    }


def _write_checkpoint(args, replica: Replica, epoch: int, history: list, topk_rows: list):
    """With ``--checkpoint``, everything :func:`_resume` needs to go on after epoch ``epoch``."""
    if args.checkpoint is None:
        return
    state = {"config": replica.config, "epoch": epoch, "model": replica.net.state_dict()}
    state["optimizer"] = None if replica.optimizer is None else replica.optimizer.state_dict()
    state |= {"rng": replica.generator.get_state(), "history": history, "topk": topk_rows}
    save(state, args.checkpoint)


def _log_epoch(row: dict, epochs: int) -> None:
    log.info(
        "epoch %d/%d: train loss %.4f, train acc %.4f, test acc %.4f, %.2f s (%.0f examples/s)"
        + (" DIVERGED" if row["diverged"] else ""),
        row["epoch"],
        epochs,
        *(row[k] for k in ("train_loss", "train_acc", "test_acc", "seconds", "samples_per_s")),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m d2lrepro.multidevice.parts.worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", choices=MODELS, default="lenet")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--batch-size", type=int, default=256, help="global minibatch, split across the workers"
    )
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--momentum", type=float, default=0.0, help="resnet18 only")
    parser.add_argument("--weight-decay", type=float, default=0.0, help="resnet18 only")
    parser.add_argument("--train-subset", type=int, help="use the first N training examples")
    parser.add_argument("--test-subset", type=int, help="use the first N test examples")
    parser.add_argument("--data", type=Path, required=True, help="prepared Fashion-MNIST (.pt)")
    parser.add_argument("--out", type=Path, required=True, help="CSV: one row per epoch")
    parser.add_argument(
        "--topk-out", type=Path, help="CSV of running loss, top-1 and top-5 accuracy"
    )
    parser.add_argument(
        "--topk-every", type=int, default=50, help="batches between --topk-out rows"
    )
    parser.add_argument(
        "--checkpoint", type=Path, help="saved every epoch, resumed from if it exists"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--order-seed",
        type=int,
        help="seed of the data order (default: one per --seed and number of workers)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds a worker waits for its peers before failing; must exceed "
        "rank 0's per-epoch evaluation and checkpointing, during which the "
        "others wait",
    )
    # tests: the last rank dies
    parser.add_argument("--fail-at-epoch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model == "lenet" and (args.momentum or args.weight_decay):
        parser.error("the from-scratch LeNet uses plain SGD: no --momentum or --weight-decay")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with joined(args.timeout) as (device, rank):
        if args.batch_size % world_size():
            raise ValueError(
                f"--batch-size {args.batch_size} does not split evenly over {world_size()} workers"
            )
        history, topk_rows = train(args, device, rank)
        if rank == 0:
            write_csv(history, args.out, RUN_COLUMNS)
            if args.topk_out is not None:
                write_csv(topk_rows, args.topk_out, TOPK_COLUMNS)


if __name__ == "__main__":
    main()
