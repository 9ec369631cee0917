"""Starting multi-device runs from the workflow: one worker in the job's own process, more under
``torchrun`` (across the nodes of a SLURM allocation with ``srun``, one torchrun agent per node
meeting at a c10d rendezvous); "not applicable here" where the machine lacks the devices or
the job the nodes. The experiments behind ``mgpu.*``, ``mgpuc.*`` and ``ps.*`` start their
workers through it: the training runs
(:mod:`~d2lrepro.multidevice.data_parallel`), the cost model and the printed examples
(:mod:`~d2lrepro.multidevice.cost_model`), the parameter servers
(:mod:`~d2lrepro.multidevice.parameter_server`)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
from types import ModuleType

from torch.distributed import run as torchrun

from d2lrepro.core.devices import SHARE_GPUS, unavailable

log = logging.getLogger(__name__)


def torchrun_argv(
    module: ModuleType,
    devices: int,
    argv: list[str],
    nodes: int = 1,
    endpoint: str = "",
    run_id: str = "",
) -> list[str]:
    """torchrun's arguments for ``devices`` workers running ``module`` (:mod:`.worker`, or an
    experiment that is its own workers' program, as :mod:`.cost_model` is) with ``argv``, on
    one node or spread evenly over ``nodes``. On one node --standalone picks a free port, so
    jobs running at once never collide; across nodes every agent meets the others at the c10d
    rendezvous ``endpoint`` (host:port) under ``run_id``.
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
def _sharing(share_gpus: bool):
    """Let the workers started in the block share the job's GPUs (``share_gpus``), or not:
    :data:`~d2lrepro.core.devices.SHARE_GPUS` in the environment they inherit."""
    saved = os.environ.pop(SHARE_GPUS, None)
    if share_gpus:
        os.environ[SHARE_GPUS] = "1"
    try:
        yield
    finally:
        os.environ.pop(SHARE_GPUS, None)
        if saved is not None:
            os.environ[SHARE_GPUS] = saved


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
    module: ModuleType,
    devices: int,
    argv: list[str],
    log_path,
    nodes: int = 1,
    run_id: str = "",
    share_gpus: bool = False,
) -> None:
    """Run ``module`` on ``devices`` workers. The job's own process is the worker of a 1-device
    run and torchrun's agent for more on one node (its workers write to the log), which saves a
    Python and torch start; across nodes srun starts an agent per node. With ``share_gpus``
    (a run about the algorithm, not the GPUs' speed) workers that outnumber the job's GPUs
    share them (:func:`~d2lrepro.core.devices.shares_gpus`), over gloo
    (:func:`~d2lrepro.multidevice.parts.process_group.backend`)."""
    with _sharing(share_gpus):
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


def nodes_unavailable(nodes: int, devices: int, share: bool = False) -> str:
    """Why a run of ``devices`` devices over ``nodes`` nodes cannot happen in this job; ""
    when it can. Each node must hold its share of the devices (the config check makes sure
    they split evenly), on GPUs it may ``share`` (:func:`~d2lrepro.core.devices.unavailable`)."""
    have = allocated_nodes()
    if nodes > have:
        return (
            f"needs {nodes} nodes, this job has {have}: run it on a SLURM cluster"
            " (snakemake --workflow-profile profiles/slurm asks for the nodes)"
        )
    return unavailable(devices // nodes, share=share)
