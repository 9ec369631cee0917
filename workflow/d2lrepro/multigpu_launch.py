"""Starting multi-device runs from the workflow: one worker in the job's own process, more under
``torchrun``; checkpoints named after the run's settings; "not applicable here" where the
machine lacks the devices."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from pathlib import Path

from .devices import unavailable
from .multigpu_run import TOPK_COLUMNS, main
from .results import write_csv, write_not_applicable

CHECKPOINTS = Path("results/multidevice/checkpoints")

log = logging.getLogger(__name__)


def command(devices: int, argv: list[str]) -> list[str]:
    """The command that runs this module on ``devices`` workers. One worker runs as a plain
    process; more run under torchrun: --standalone picks a free port, so jobs running at once
    never collide, and --max-restarts 0 ends the group when a worker dies."""
    python = [sys.executable]
    if devices > 1:
        python += [
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={devices}",
            "--max-restarts=0",
        ]
    return [*python, "-m", "d2lrepro.multigpu_run", *argv]


def run_argv(run: dict) -> list[str]:
    """Command-line flags for one training run of the config (model, epochs, batch_size, lr...)."""
    flags = (
        "model",
        "epochs",
        "batch_size",
        "lr",
        "momentum",
        "weight_decay",
        "train_subset",
        "test_subset",
    )
    return [
        item
        for key in flags
        if run.get(key) is not None
        for item in (f"--{key.replace('_', '-')}", str(run[key]))
    ]


def _launch(devices: int, argv: list[str], log_path) -> None:
    """Run the workers; one runs in this process (the job's own), which saves a Python start."""
    if devices == 1:
        log.info("one worker in this process: %s", " ".join(argv))
        main(argv)
        return
    cmd = command(devices, argv)
    log.info("%s", " ".join(cmd))
    with open(log_path, "a") as stream:
        subprocess.run(cmd, stdout=stream, stderr=subprocess.STDOUT, check=True)


def launch_training(
    name: str, run: dict, seed: int, data, history, topk, topk_every: int, timeout: float, log_path
) -> None:
    """Train run ``name`` of the config on its devices, or record why it cannot run here.

    The checkpoint lives outside the outputs, so an interrupted job resumes from it; its name
    carries the run's settings, so a changed setting never resumes from a stale one."""
    reason = unavailable(run["devices"])
    if reason:
        write_not_applicable(history, reason)
        write_csv([], topk, TOPK_COLUMNS)
        return
    key = hashlib.sha256(json.dumps([run, seed], sort_keys=True).encode()).hexdigest()[:12]
    # Only the run that logs top-k pays for its collectives; the others leave the file empty.
    topk_args = ["--topk-out", str(topk), "--topk-every", str(topk_every)]
    if not run.get("topk"):
        write_csv([], topk, TOPK_COLUMNS)
        topk_args = []
    checkpoint = CHECKPOINTS / f"{name}-{key}.pt"
    _launch(
        run["devices"],
        run_argv(run)
        + [
            "--data",
            str(data),
            "--out",
            str(history),
            "--checkpoint",
            str(checkpoint),
            "--seed",
            str(seed),
            "--timeout",
            str(timeout),
            *topk_args,
        ],
        log_path,
    )
    checkpoint.unlink()


def launch_cost_model(costs: dict, outputs: dict, seed: int, timeout: float, log_path) -> None:
    """The cost model of each model of ``costs`` between 2 devices, written to
    ``outputs[model]``, or why it cannot be measured here."""
    reason = unavailable(2)
    if reason:
        for model in costs:
            write_not_applicable(outputs[model], reason)
        return
    spec = {m: {**cost, "out": str(outputs[m])} for m, cost in costs.items()}
    argv = ["--cost-model", json.dumps(spec), "--seed", str(seed)]
    _launch(2, [*argv, "--timeout", str(timeout)], log_path)
