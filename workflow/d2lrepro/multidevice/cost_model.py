"""The cost model of a synchronous data-parallel step (``mgpu.cost_model``):
computation t1 against communication t2, and the step as measured, per batch size, for three
steps (:data:`STEPS`): the from-scratch LeNet, which computes all its gradients and then
synchronizes them, and LeNet and ResNet-18 through DDP, which all-reduces buckets of gradients
while the backward pass still runs. Its summary also holds the section's printed examples
(``mgpu.params``, ``mgpu.allreduce``, ``mgpu.scatter``, ``mgpu.split_and_load``), which the
same launch of 2 workers makes (``mgpu.params``, which needs one device, is made on the job's
own device where there are not 2).

Each worker of the launch runs this module (``python -m d2lrepro.multidevice.cost_model`` under
``torchrun``) and joins the run as a training worker does
(:func:`d2lrepro.multidevice.parts.process_group.joined`); rank 0 writes what they measure."""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from d2lrepro.core.results import (
    failed,
    iqr,
    metric,
    not_applicable,
    read_metrics,
    write_csv,
    write_metrics,
    write_not_applicable,
)
from d2lrepro.multidevice.parts.cost_spans import step_spreads, t1_over_t2_spread

if TYPE_CHECKING:
    import torch

COST_COLUMNS = [
    "model",
    "batch_per_device",
    "t1",
    "t2",
    "max_t1_t2",
    "measured_step",
    "t1_iqr",
    "t2_iqr",
    "step_iqr",
    "params",
    "devices",
    "world_size",
]
# The printed examples' metrics, as the 2 workers of
# d2lrepro.multidevice.parts.allreduce_by_hand make them; those of get_params's copy
# (mgpu.params) need one device only.
ONE_DEVICE = [f"params.b1_{n}" for n in ("zeros", "requires_grad", "on_device", "grad_is_none")]
EXAMPLE_METRICS = [
    *ONE_DEVICE,
    *(f"allreduce.shard{r}.{j}" for r in range(2) for j in range(2)),
    *(
        f"{name}.shard{r}.{end}_row"
        for name in ("scatter", "split6x4")
        for r in range(2)
        for end in ("first", "last")
    ),
]

# The cost model at the balanced batch, whose t1 / t2 must lie within 1/BALANCE and BALANCE
# (see cost_metrics).
BALANCED = ("batch", "t1_over_t2", "step_over_max", "step_over_sum", "max_error", "sum_error")
# The balanced ratios the claim judges, each with the spread its times' IQRs give it.
SPREAD = ("step_over_max", "max_error", "sum_error")
BALANCE = 2
WARMUP = 2  # untimed calls before each cost-model measurement
# LeNet's 0.5 MB of gradients in DDP buckets of 0.1 MiB: the fully connected layers' buckets,
# ready first, are all-reduced while the convolutions' backward runs (one bucket of DDP's
# default 25 MiB would wait for the whole backward pass).
LENET_BUCKET_MB = 0.1
STEPS = ("lenet", "lenet_ddp", "resnet18")

log = logging.getLogger(__name__)


def setup(name: str, seed: int, lr: float, device: torch.device):
    """Step ``name`` of :data:`STEPS`: the network, ``step(x, y, global_batch)`` and
    ``communicate(params)``, the communication that step does."""
    from d2lrepro.core.devices import place
    from d2lrepro.core.models import ScratchLeNet
    from d2lrepro.multidevice.parts.allreduce_by_hand import scratch_setup, sync_grads

    # Here and in the functions below that measure, not at the top: they import torch, which
    # the summary's job does not need.
    from d2lrepro.multidevice.parts.ddp import all_reduce_grads, concise_setup, ddp_setup

    if name == "lenet":
        net, _, step = scratch_setup(seed, lr, device)
        return net, step, sync_grads
    if name == "lenet_ddp":
        net = place(ScratchLeNet(seed), device)
        _, _, step = ddp_setup(net, lr, device, bucket_cap_mb=LENET_BUCKET_MB)
        return net, step, all_reduce_grads
    if name == "resnet18":
        net, _, step = concise_setup(seed, lr, device)
        return net, step, all_reduce_grads
    raise ValueError(f"no cost-model step {name!r}: one of {STEPS}")


def _median_seconds(
    fn: Callable[[], object], repeats: int, device: torch.device
) -> tuple[float, float]:
    """Median wall time of ``fn`` over ``repeats`` calls after :data:`WARMUP` untimed ones, and
    its IQR; all workers start each call together."""
    import torch.distributed as dist

    from d2lrepro.core.devices import world_size
    from d2lrepro.core.timing import Clock

    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(repeats):
        if world_size() > 1:
            dist.barrier()
        with Clock(device) as clock:
            fn()
        times.append(clock.seconds)
    return statistics.median(times), iqr(times)


def cost_model(
    model: str, batches, repeats: int, seed: int, lr: float, device: torch.device
) -> list[dict]:
    """The section's cost model of step ``model`` (:func:`setup`), per per-device batch size
    ``b``.

    ``t1``: forward and backward of ``b`` random examples on one device, without any
    communication (every worker at once, as in a real step, rank 0's time reported); ``t2``:
    the step's communication of all gradients between the workers (0 work with one worker);
    ``measured_step``: the full training step on all workers with a global batch of
    ``b * world_size``. One row per batch size (:data:`COST_COLUMNS`).
    """
    import torch
    from torch.nn import functional as F

    from d2lrepro.core.devices import describe, run_devices, world_size

    net, step, communicate = setup(model, seed, lr, device)
    world = world_size()
    params = list(net.parameters())
    generator = torch.Generator().manual_seed(seed)
    devices = describe(run_devices(world))
    rows = []
    for b in batches:
        x = torch.rand((b, 1, 28, 28), generator=generator).to(device)
        y = torch.randint(0, 10, (b,), generator=generator).to(device)

        def forward_backward():
            net.zero_grad()
            F.cross_entropy(net(x), y, reduction="sum").backward()

        t1, t1_iqr = _median_seconds(forward_backward, repeats, device)
        t2, t2_iqr = _median_seconds(lambda: communicate(params), repeats, device)
        measured, step_iqr = _median_seconds(lambda: step(x, y, b * world), repeats, device)
        rows.append(
            {
                "model": model,
                "batch_per_device": b,
                "t1": t1,
                "t2": t2,
                "max_t1_t2": max(t1, t2),
                "measured_step": measured,
                "t1_iqr": t1_iqr,
                "t2_iqr": t2_iqr,
                "step_iqr": step_iqr,
                "params": sum(p.numel() for p in params),
                "devices": devices,
                "world_size": world,
            }
        )
        log.info("batch %d per device: t1 %.4f s, t2 %.4f s, step %.4f s", b, t1, t2, measured)
    return rows


def launch(
    costs: dict,
    outputs: dict,
    examples,
    seed: int,
    timeout: float,
    log_path,
    shortfall: str = "",
) -> None:
    """One launch of 2 workers that train nothing: the cost model of each model of ``costs``,
    written to ``outputs[model]``, and the section's printed examples, written to
    ``examples``; or why they cannot be measured here (the ``shortfall`` the run's plan
    found, else what the job finds). Without 2 devices the example that needs one
    (:data:`ONE_DEVICE`) is made on the job's device, in its own process. The printed examples
    are the code's, whatever the devices: their 2 workers may share a GPU. The cost model
    times each worker's step, so it needs 2 devices of their own: where the 2 workers share
    a GPU, they make the printed examples only."""
    from d2lrepro.core.devices import device_for, unavailable
    from d2lrepro.multidevice.parts import launcher
    from d2lrepro.multidevice.parts.allreduce_by_hand import params_example

    reason = shortfall or unavailable(2, share=True)
    if reason:
        for path in outputs.values():
            write_not_applicable(path, reason)
        made = params_example(device_for(0, 1))
        two = [not_applicable(m, reason) for m in EXAMPLE_METRICS if m not in ONE_DEVICE]
        write_metrics(made + two, examples)
        return
    argv = ["--examples-out", str(examples), "--seed", str(seed), "--timeout", str(timeout)]
    timing = unavailable(2)
    if timing:
        for path in outputs.values():
            write_not_applicable(path, timing)
    else:
        spec = {m: {**cost, "out": str(outputs[m])} for m, cost in costs.items()}
        argv += ["--cost-model", json.dumps(spec)]
    # The workers run this module's main: named here, its imports are the rule's inputs.
    launcher.launch(sys.modules[main.__module__], 2, argv, log_path, share_gpus=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m d2lrepro.multidevice.cost_model",
        description="A worker of the cost model and the printed examples",
    )
    parser.add_argument(
        "--cost-model",
        type=json.loads,
        metavar="JSON",
        help="the cost model of each step of "
        '{"STEP": {"batches": [per-device batch sizes], "repeats": N, "out": CSV}} '
        "(steps: lenet, lenet_ddp, resnet18)",
    )
    parser.add_argument("--examples-out", type=Path, help="CSV of the section's printed examples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.2, help="of the cost model's SGD steps")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for peers")
    args = parser.parse_args(argv)
    if args.cost_model is None and args.examples_out is None:
        parser.error("nothing to measure: give --cost-model or --examples-out")
    return args


def main(argv: list[str] | None = None) -> None:
    from d2lrepro.multidevice.parts.allreduce_by_hand import printed_examples
    from d2lrepro.multidevice.parts.process_group import joined

    args = parse_args(argv)
    with joined(args.timeout) as (device, rank):
        # One launch measures every step of the spec and the examples: a torchrun start
        # costs seconds.
        for model, spec in (args.cost_model or {}).items():
            rows = cost_model(model, spec["batches"], spec["repeats"], args.seed, args.lr, device)
            if rank == 0:
                write_csv(rows, spec["out"], COST_COLUMNS)
        if args.examples_out is not None:
            rows = printed_examples(device)
            if rank == 0:
                write_metrics(rows, args.examples_out)


def cost_metrics(cost: pd.DataFrame, model: str) -> list[dict]:
    """The cost model's verdict numbers: t1 / t2 at the smallest and largest batch, and at the
    balanced batch (least |log t1/t2|: max(t1, t2) and t1 + t2 differ most) the measured step
    over max(t1, t2) and over t1 + t2, and its relative error from each; the crossover batch (first
    t1 > t2) is shown.

    The balanced batch must have t1 / t2 within [1/:data:`BALANCE`, :data:`BALANCE`], where
    max(t1, t2) is at most 2/3 of t1 + t2; further apart the two differ too little for the
    step to tell them apart, and the balanced metrics are not applicable: the claim needs a
    step whose communication is comparable to its computation."""
    names = ("t1_over_t2.smallest", "t1_over_t2.largest", "t1_over_t2.largest_iqr")
    names += ("crossover_batch", *(f"balanced.{n}" for n in BALANCED))
    names += tuple(f"balanced.{n}_iqr" for n in SPREAD)
    if "note" in cost and cost["note"].notna().any():
        reason = cost["note"].dropna().iloc[0]
        return [not_applicable(f"cost.{model}.{n}", reason) for n in names]
    first, last = cost.iloc[0], cost.iloc[-1]
    dominated = cost[cost["t1"] > cost["t2"]]["batch_per_device"]
    crossover = (
        metric(f"cost.{model}.crossover_batch", dominated.min())
        if len(dominated)
        else failed(f"cost.{model}.crossover_batch", "communication dominates at every batch")
    )
    ends = [
        metric(f"cost.{model}.t1_over_t2.smallest", first.t1 / first.t2, "x"),
        metric(f"cost.{model}.t1_over_t2.largest", last.t1 / last.t2, "x"),
        metric(f"cost.{model}.t1_over_t2.largest_iqr", t1_over_t2_spread(last), "x"),
        crossover,
    ]
    at = cost.loc[np.log(cost["t1"] / cost["t2"]).abs().idxmin()]
    ratio = at.t1 / at.t2
    if not 1 / BALANCE <= ratio <= BALANCE:
        why = (
            f"no balanced batch: t1 / t2 is nearest 1 at batch {at.batch_per_device:g} per"
            f" device, {ratio:.3g}, outside 1/{BALANCE}–{BALANCE}, where max(t1, t2) and"
            " t1 + t2 differ too little to tell apart; a model or link whose communication"
            " is comparable to its computation at some batch would judge it"
        )
        balanced = [*BALANCED, *(f"{n}_iqr" for n in SPREAD)]
        return ends + [not_applicable(f"cost.{model}.balanced.{n}", why) for n in balanced]
    over = (at.measured_step / max(at.t1, at.t2), at.measured_step / (at.t1 + at.t2))
    values = (at.batch_per_device, ratio, *over, *(abs(o - 1) for o in over))
    # Each but the batch is a ratio of times, and weighs as timings do against their noise.
    units = ("", *["x"] * (len(BALANCED) - 1))
    spreads = step_spreads(at)
    return (
        ends
        + [metric(f"cost.{model}.balanced.{n}", v, u) for n, v, u in zip(BALANCED, values, units)]
        + [metric(f"cost.{model}.balanced.{n}_iqr", w, "x") for n, w in zip(SPREAD, spreads)]
    )


def example_metrics(examples: pd.DataFrame) -> list[dict]:
    """The printed examples as the 2 workers made them (their metrics CSV as
    :func:`~d2lrepro.core.results.read_metrics` reads it), or why they could not be made here."""
    if "metric" not in examples:
        return [not_applicable(name, examples["note"].iloc[0]) for name in EXAMPLE_METRICS]
    return examples.to_dict("records")


def summarize(costs: list, examples, records: dict[str, dict], metrics_out, figure_path) -> None:
    """The cost model's metrics (``costs``: one CSV per step, named after it) and the printed
    examples (``examples``, a metrics CSV) in ``metrics_out``, and the cost model's figure;
    rows and footer name the machines that measured them (``records``)."""
    from d2lrepro.multidevice.parts import figures, run_results  # only in the job that draws

    tables = {Path(p).stem: pd.read_csv(p) for p in costs}
    rows = example_metrics(read_metrics(examples))
    for model, cost in tables.items():
        rows += run_results.measured_by(cost_metrics(cost, model), cost)
    write_metrics(rows, metrics_out)
    figures.draw_cost(tables, figure_path, run_results.footer(records, *tables.values()))


if __name__ == "__main__":
    main()
