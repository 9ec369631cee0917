"""Starting multi-device runs from the workflow: one worker in the job's own process, more under
``torchrun`` (across the nodes of a SLURM allocation with ``srun``, one torchrun agent per node
meeting at a c10d rendezvous); "not applicable here" where the machine lacks the devices or
the job the nodes. It starts the probes behind ``mgpu.*`` and ``ps.*`` (the cost model, the
printed examples, the parameter servers); the training runs start from
:mod:`~d2lrepro.multidevice.data_parallel`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
from torch.distributed import run as torchrun

from d2lrepro.core.devices import machine_devices, unavailable
from d2lrepro.core.results import METRIC_COLUMNS, write_metrics, write_not_applicable
from d2lrepro.multidevice import probes
from d2lrepro.multidevice.parameter_server import unmeasured_rows

log = logging.getLogger(__name__)


def torchrun_argv(
    module: ModuleType,
    devices: int,
    argv: list[str],
    nodes: int = 1,
    endpoint: str = "",
    run_id: str = "",
) -> list[str]:
    """torchrun's arguments for ``devices`` workers running ``module`` (:mod:`.worker` or
    :mod:`.probes`) with ``argv``, on one node or spread evenly over ``nodes``. On one node
    --standalone picks a free port, so jobs running at once never collide; across nodes every
    agent meets the others at the c10d rendezvous ``endpoint`` (host:port) under ``run_id``.
    --max-restarts 0 ends the group when a worker dies."""
    if nodes == 1:
        where = ["--standalone"]
    else:
        where = [
            f"--nnodes={nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}",
        ]
    flags = [*where, f"--nproc-per-node={devices // nodes}", "--max-restarts=0"]
    return [*flags, "-m", module.__name__, *argv]


def allocated_nodes() -> int:
    """Nodes of the SLURM allocation this job runs in (1 outside SLURM)."""
    return int(os.environ.get("SLURM_JOB_NUM_NODES", 1))


def free_port() -> int:
    """A TCP port free on this host now, for the rendezvous this host serves."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def across_nodes(
    module: ModuleType, nodes: int, devices: int, argv: list[str], run_id: str
) -> list[str]:
    """The command that starts one torchrun agent on each of ``nodes`` nodes of this SLURM
    allocation (srun, one task per node); this node, where the job runs, serves the
    rendezvous."""
    endpoint = f"{socket.gethostname()}:{free_port()}"
    return [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_argv(module, devices, argv, nodes, endpoint, run_id),
    ]


def command(module: ModuleType, devices: int, argv: list[str]) -> list[str]:
    """The command line that runs ``module`` with ``argv`` on ``devices`` workers."""
    if devices == 1:
        return [sys.executable, "-m", module.__name__, *argv]
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_argv(module, devices, argv)]


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


def launch(
    module: ModuleType, devices: int, argv: list[str], log_path, nodes: int = 1, run_id: str = ""
) -> None:
    """Run ``module`` on ``devices`` workers. The job's own process is the worker of a 1-device
    run and torchrun's agent for more on one node (its workers write to the log), which saves a
    Python and torch start; across nodes srun starts an agent per node."""
    if nodes > 1:
        cmd = across_nodes(module, nodes, devices, argv, run_id)
        log.info("as %s", " ".join(cmd))
        with open(log_path, "a") as stream:
            subprocess.run(cmd, stdout=stream, stderr=subprocess.STDOUT, check=True)
        return
    log.info("as %s", " ".join(command(module, devices, argv)))
    if devices == 1:
        module.main(argv)
        return
    with _output_to(log_path):
        torchrun.main(torchrun_argv(module, devices, argv))


def nodes_unavailable(nodes: int, devices: int) -> str:
    """Why a run of ``devices`` devices over ``nodes`` nodes cannot happen in this job; ""
    when it can. Each node must hold its share of the devices (the config check makes sure
    they split evenly)."""
    have = allocated_nodes()
    if nodes > have:
        return (
            f"needs {nodes} nodes, this job has {have}: run it on a SLURM cluster"
            " (snakemake --workflow-profile profiles/slurm asks for the nodes)"
        )
    return unavailable(devices // nodes)


def launch_probes(
    costs: dict, outputs: dict, examples, seed: int, timeout: float, log_path
) -> None:
    """One launch of 2 workers that train nothing: the cost model of each model of ``costs``,
    written to ``outputs[model]``, and the section's printed examples, written to
    ``examples``; or why they cannot be measured here."""
    reason = unavailable(2)
    if reason:
        for path in [*outputs.values(), examples]:
            write_not_applicable(path, reason)
        return
    spec = {m: {**cost, "out": str(outputs[m])} for m, cost in costs.items()}
    argv = ["--cost-model", json.dumps(spec), "--examples-out", str(examples)]
    launch(probes, 2, [*argv, "--seed", str(seed), "--timeout", str(timeout)], log_path)


def launch_param_server(spec: dict, out, timeout: float, log_path) -> None:
    """The parameter-server timings of ``spec`` (mb, repeats, max_devices) on 2 workers
    (metrics ``ps.*``) and on all the machine's devices, at most ``max_devices`` (``ps.all.*``),
    one launch each, written together to ``out``; what cannot run here says why."""
    most = min(spec["max_devices"], machine_devices())
    rows = []
    for workers, prefix in ((2, "ps"), (most, "ps.all")):
        reason = unavailable(workers)
        if not reason and prefix == "ps.all" and most <= 2:
            limit = unavailable(3) or f"parameter_server.max_devices is {spec['max_devices']}"
            reason = f"no more devices than the 2-worker run's ({limit})"
        if reason:
            rows += unmeasured_rows(reason, prefix)
            continue
        part = Path(out).with_suffix(f".{workers}.csv")
        measure = {"mb": spec["mb"], "repeats": spec["repeats"], "prefix": prefix, "out": str(part)}
        argv = ["--param-server", json.dumps(measure), "--timeout", str(timeout)]
        launch(probes, workers, argv, log_path)
        measured = pd.read_csv(part, dtype={c: str for c in METRIC_COLUMNS[2:]})
        rows += measured.fillna({c: "" for c in METRIC_COLUMNS[2:]}).to_dict("records")
        part.unlink()
    write_metrics(rows, out)
