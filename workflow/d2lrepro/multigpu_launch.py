"""Starting multi-device runs from the workflow: one worker in the job's own process, more under
``torchrun``; checkpoints named after the run's settings; "not applicable here" where the
machine lacks the devices."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
from pathlib import Path

from torch.distributed import run as torchrun

from .devices import unavailable
from .multigpu_run import TOPK_COLUMNS, main
from .results import write_csv, write_not_applicable

CHECKPOINTS = Path("results/multidevice/checkpoints")

log = logging.getLogger(__name__)


def torchrun_argv(devices: int, argv: list[str]) -> list[str]:
    """torchrun's arguments for ``devices`` workers of this module: --standalone picks a free
    port, so jobs running at once never collide, and --max-restarts 0 ends the group when a
    worker dies."""
    flags = ["--standalone", f"--nproc-per-node={devices}", "--max-restarts=0"]
    return [*flags, "-m", "d2lrepro.multigpu_run", *argv]


def command(devices: int, argv: list[str]) -> list[str]:
    """The command line that runs this module on ``devices`` workers."""
    if devices == 1:
        return [sys.executable, "-m", "d2lrepro.multigpu_run", *argv]
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_argv(devices, argv)]


@contextlib.contextmanager
def _output_to(log_path):
    """Send this process's stdout and stderr, and so its children's, to ``log_path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "a") as stream:
        for fd in (1, 2):
            os.dup2(stream.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)


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
    """Run the workers. The job's own process is the worker of a 1-device run and torchrun's
    agent for more (its workers write to the log), which saves a Python and torch start."""
    log.info("as %s", " ".join(command(devices, argv)))
    if devices == 1:
        main(argv)
        return
    with _output_to(log_path):
        torchrun.main(torchrun_argv(devices, argv))


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


def launch_probes(
    costs: dict, outputs: dict, examples, seed: int, timeout: float, log_path
) -> None:
    """One launch of 2 workers that train nothing: the cost model of each model of ``costs``,
    written to ``outputs[model]``, and the section's printed examples, written to ``examples``;
    or why they cannot be measured here."""
    reason = unavailable(2)
    if reason:
        for path in [*outputs.values(), examples]:
            write_not_applicable(path, reason)
        return
    spec = {m: {**cost, "out": str(outputs[m])} for m, cost in costs.items()}
    argv = ["--cost-model", json.dumps(spec), "--examples-out", str(examples)]
    _launch(2, [*argv, "--seed", str(seed), "--timeout", str(timeout)], log_path)
