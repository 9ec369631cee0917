"""Jobs that start warm: each script runs in a child forked from one server that has imported
torch, pandas, matplotlib and this package once, instead of in a fresh interpreter that imports
them again (seconds a job: most of a small job's time).

A run's first step starts the server (:func:`start`, from the workflow's ``onstart``) without
waiting for its imports: the jobs that start before it listens run in their own Python, beside
it, except the jobs that time, which wait for it, so that its imports run beside no timing.
Each script's first statement is :func:`hand_over`, which sends the script, its working
directory, environment and standard streams to the server and waits for the child's exit
status. The child is a new session: when the job's process dies, the server stops the
child's process group (torchrun's agent stops the workers it started in sessions of their own).
It takes the job's environment, temporary folder and threads (torch's and BLAS's), reseeds the
generators a fresh interpreter seeds at random, and runs the script from its first line. The
server only imports: it forks nothing after a thread, CUDA or a device has started
(:func:`d2lrepro.pipeline.job_forks.fork_safe`).

The server runs on Linux only (pidfds, /proc, SEQPACKET sockets, the parent-death signal). The
run names it in the jobs' environment only once it listens. Each child asks the kernel for a
SIGTERM when the server ends, so that none outlives it; a child told to stop has
:data:`STOP_GRACE_S` (30 s, as torchrun gives its workers) before a SIGKILL.

Where no server answers (none started: ``job_server: false``, another system, a dry run,
``--sdm conda``; a cluster job on another node; a Python other than the server's), or the
server's package code is older than the files (edited during the run), :func:`hand_over`
returns and the script runs in its own process, as it always could.

Snakemake's benchmark of a job measures the job's own process: its wall time ``s`` is the
job's, its memory and CPU columns count the small process that waited for the child; the
child logs its own peak memory and CPU time as it exits (:func:`d2lrepro.pipeline.job.start`).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

SOCKETS = Path(".snakemake") / "job_server"
# The run whose server the jobs hand themselves over to (set by start, inherited by its jobs).
RUN = "D2LREPRO_JOB_SERVER"
# The run whose server is still importing (set by start until it listens): only jobs that
# time wait for it (hand_over); the others start their own Python.
STARTING = "D2LREPRO_JOB_SERVER_STARTING"
# Set in a child and everything it starts (torchrun's workers, a spawned process), so that a
# script run again there runs in place instead of handing itself over once more.
CHILD = "D2LREPRO_JOB_SERVER_CHILD"
REFUSED = b"refused"  # the server's code is out of date: the job runs in place
STREAMS = (0, 1, 2)
READY_S = 120.0  # a server still importing after this long is left behind
# A child told to stop (SIGTERM) has this long to end before a SIGKILL, as torchrun gives its
# workers.
STOP_GRACE_S = 30.0
# The server's environment: no thread started by an import, which a child would lack. One
# thread each for the thread pools (numpy's BLAS starts its pool as it loads; a child sets the
# job's own), and no background thread for the jemalloc of pyarrow, which pandas imports where
# it is installed.
SERVER_ENV = {
    **dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1"),
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}


def socket_path(run: str, prefix: str = sys.prefix) -> Path:
    """Where run ``run``'s server for the Python installed at ``prefix`` listens, relative to the
    run's working directory: a job run by another Python finds none."""
    return SOCKETS / f"{run}-{hashlib.sha1(prefix.encode()).hexdigest()[:12]}.sock"


def starting_path(path: Path) -> Path:
    """The file beside a server's socket ``path`` that says the server is still importing."""
    return path.with_suffix(".starting")


# Why a script that returned from hand_over runs in its own Python, for its log (job.start).
why_here = "no job server runs for this run here"


def hand_over(snakemake) -> None:
    """Run this script in a child of the job server and exit with its status; return at once,
    to run it here, where no server answers or this process is already such a child (saying
    why in ``why_here``). A job that times (its rule passes ``ran_alone``: True) first waits
    for a server still importing to listen or stop."""
    global why_here
    if os.environ.get(CHILD):
        return
    run = os.environ.get(RUN)
    starting = os.environ.get(STARTING)
    if not run and starting:
        if not snakemake.params.get("ran_alone"):
            why_here = "the job server was still importing"
            return
        deadline = time.monotonic() + READY_S
        while starting_path(socket_path(starting)).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        run = starting
    if not run:
        return
    client = None
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(str(socket_path(run)))
        request = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(client, [json.dumps(request).encode()], list(STREAMS))
    except (OSError, AttributeError):  # no such socket type here (not Linux), or no server
        if client is not None:
            client.close()
        why_here = "no job server answered"
        return
    try:
        status = client.recv(16)
    except OSError:
        status = b""
    if status == REFUSED:
        client.close()
        why_here = "the job server's code is older than the package's files"
        return
    # The request was taken: whatever happens now, the job is the child's, never run here too.
    if not status:
        sys.stderr.write(f"{snakemake.rule}: the job server stopped before the job ended\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status) if status else 1)


def wanted(workflow) -> bool:
    """Whether a run of Snakemake's ``workflow`` starts a job server: on Linux, the one system
    it is proven on (it needs pidfds, /proc and SEQPACKET sockets), where the run runs its jobs
    itself, in this Python (no cluster, no conda), and runs them, not only touches their
    outputs."""
    return (
        sys.platform == "linux"
        and workflow.local_exec
        and not workflow.deployment_settings.deployment_method
        and not workflow.touch
    )


def start(log_path: Path, python: str = sys.executable) -> subprocess.Popen:
    """Start this run's job server, and return while it imports: the jobs this process starts
    once it listens hand themselves over to it (:func:`hand_over`). A thread (``watcher`` of
    the process returned) waits for it to listen, and only then names it in the environment
    the jobs inherit; where it stops or does not listen in time, the thread says why on
    standard error and stops it, and the jobs start their own Python."""
    run = str(os.getpid())
    path = socket_path(run)
    for folder in (path.parent, Path(log_path).parent):
        folder.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # left by a run of a process with this pid, killed
    with open(log_path, "w") as output:
        server = subprocess.Popen(
            [python, "-m", "d2lrepro.pipeline.job_forks", str(path), run],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=os.environ | SERVER_ENV,
            start_new_session=True,
        )
    starting_path(path).touch()
    os.environ[STARTING] = run
    # the run's working directory named once: the thread outlives a change of directory
    where = (server, run, path.absolute(), Path(log_path).absolute())
    server.watcher = threading.Thread(target=_watch, args=where, daemon=True)
    server.watcher.start()
    return server


def _watch(server: subprocess.Popen, run: str, path: Path, log_path: Path) -> None:
    """Wait for ``server`` to listen at ``path``, then name it in the run's environment (the
    jobs started from then on inherit it); where it stops or does not listen in time first,
    say why and stop it: the jobs find no server named and start their own Python. Either
    way, jobs that time wait no longer."""
    deadline = time.monotonic() + READY_S
    try:
        while not path.exists():
            if os.environ.get(STARTING) != run:
                return  # the run stopped the server
            if server.poll() is not None or time.monotonic() > deadline:
                why = why_not(server, log_path)
                _end(server)
                sys.stderr.write(
                    f"job server not started ({why}): each job starts its own Python"
                    f" (log: {log_path})\n"
                )
                return
            time.sleep(0.05)
        if os.environ.get(STARTING) == run:
            os.environ[RUN] = run
    finally:
        os.environ.pop(STARTING, None)
        starting_path(path).unlink(missing_ok=True)


def why_not(server: subprocess.Popen, log_path: Path) -> str:
    """Why ``server`` is not listening: still importing, killed, or ended with an error (its
    log's last line)."""
    code = server.returncode
    if code is None:
        return f"no answer within {READY_S:.0f} s"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    try:
        lines = Path(log_path).read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return f"exit status {code}" + (f": {lines[-1]}" if lines else "")


def stop(server: subprocess.Popen | None) -> None:
    """Stop the job server (it stops what children still run) and wait for it; the jobs this
    process starts from now on start their own Python."""
    os.environ.pop(RUN, None)
    os.environ.pop(STARTING, None)
    _end(server)


def _end(server: subprocess.Popen | None) -> None:
    """Stop ``server`` if it runs, and wait for it."""
    if server is None or server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(STOP_GRACE_S + 5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
