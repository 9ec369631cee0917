"""What the workers of a multi-device run measure without training: the cost model of each
step of ``--cost-model`` (``mgpu.cost_model``), the section's printed examples (``mgpu.params``,
``mgpu.allreduce``, ``mgpu.scatter``, ``mgpu.split_and_load``) and the parameter servers'
timings (``ps.*``), each written by rank 0.

Started as the worker is (:mod:`d2lrepro.multidevice.launcher`): ``python -m
d2lrepro.multidevice.probes ...`` for one worker, under ``torchrun`` for more; each process
joins the run as a training worker does (:func:`d2lrepro.multidevice.worker.joined`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from d2lrepro.core.results import write_csv, write_metrics
from d2lrepro.multidevice import parameter_server
from d2lrepro.multidevice.cost_model import COST_COLUMNS, cost_model
from d2lrepro.multidevice.scratch import printed_examples
from d2lrepro.multidevice.worker import joined


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m d2lrepro.multidevice.probes", description=__doc__.split("\n")[0]
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
    parser.add_argument(
        "--param-server",
        type=json.loads,
        metavar="JSON",
        help='the parameter-server strategies, {"mb": gradient MB, "repeats": N, '
        '"prefix": metric prefix, "out": CSV}',
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.2, help="of the cost model's SGD steps")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds a worker waits for its peers"
    )
    args = parser.parse_args(argv)
    if args.cost_model is None and args.examples_out is None and args.param_server is None:
        parser.error("nothing to measure: give --cost-model, --examples-out or --param-server")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with joined(args.timeout) as (device, rank):
        # One launch measures every model of the spec: a torchrun start costs seconds.
        for model, spec in (args.cost_model or {}).items():
            rows = cost_model(model, spec["batches"], spec["repeats"], args.seed, args.lr, device)
            if rank == 0:
                write_csv(rows, spec["out"], COST_COLUMNS)
        if args.examples_out is not None:
            rows = printed_examples(device)
            if rank == 0:
                write_metrics(rows, args.examples_out)
        if args.param_server is not None:
            spec = args.param_server
            rows = parameter_server.measure(spec["mb"], spec["repeats"], device, spec["prefix"])
            if rank == 0:
                write_metrics(rows, spec["out"])


if __name__ == "__main__":
    main()
