"""Jobs that start warm: each script runs in a child forked from one server that has imported
torch, pandas, matplotlib and this package once, instead of in a fresh interpreter that imports
them again (seconds a job: most of a small job's time).

A run's first step starts the server (:func:`start`, from the workflow's ``onstart``) and waits
until it listens; each script's first statement is :func:`hand_over`, which sends the script,
its working directory, environment and standard streams to the server and waits for the child's
exit status. The child is a new session: when the job's process dies, the server stops the
child's process group (torchrun's agent stops the workers it started in sessions of their own).
It takes the job's environment, temporary folder and threads (torch's and BLAS's), reseeds the
generators a fresh interpreter seeds at random, and runs the script from its first line. The
server only imports: it forks nothing after a thread, CUDA or a device has started
(:func:`fork_safe`).

Where no server answers (none started: ``job_server: false``, a dry run, ``--sdm conda``; a
cluster job on another node; a Python other than the server's), or the server's package code is
older than the files (edited during the run), :func:`hand_over` returns and the script runs in
its own process, as it always could.

Snakemake's benchmark of a job measures the job's own process: its wall time ``s`` is the
job's, its memory and CPU columns count the small process that waited for the child.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import importlib
import json
import os
import pkgutil
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

SOCKETS = Path(".snakemake") / "job_server"
# The run whose server the jobs hand themselves over to (set by start, inherited by its jobs).
RUN = "D2LREPRO_JOB_SERVER"
# Set in a child and everything it starts (torchrun's workers, a spawned process), so that a
# script run again there runs in place instead of handing itself over once more.
CHILD = "D2LREPRO_JOB_SERVER_CHILD"
# What the scripts and Snakemake's preamble import, and torch._dynamo, which the first optimizer
# a process builds imports (a second): the server imports them once.
WARM = (
    "numpy",
    "pandas",
    "torch",
    "torch._dynamo",
    "matplotlib",
    "seaborn",
    "threadpoolctl",
    "snakemake.script",
)
REFUSED = b"refused"  # the server's code is out of date: the job runs in place
MAX_REQUEST = 1 << 20
STREAMS = (0, 1, 2)
READY_S = 120.0  # a server still importing after this long is left behind
STOP_GRACE_S = 5.0


def socket_path(run: str, prefix: str = sys.prefix) -> Path:
    """Where run ``run``'s server for the Python installed at ``prefix`` listens, relative to the
    run's working directory: a job run by another Python finds none."""
    return SOCKETS / f"{run}-{hashlib.sha1(prefix.encode()).hexdigest()[:12]}.sock"


def hand_over(snakemake) -> None:
    """Run this script in a child of the job server and exit with its status; return at once,
    to run it here, where no server answers or this process is already such a child."""
    run = os.environ.get(RUN)
    if not run or os.environ.get(CHILD):
        return
    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        client.connect(str(socket_path(run)))
        request = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(client, [json.dumps(request).encode()], list(STREAMS))
    except OSError:
        client.close()
        return  # no server answers: the script runs here
    try:
        status = client.recv(16)
    except OSError:
        status = b""
    if status == REFUSED:
        client.close()
        return
    # The request was taken: whatever happens now, the job is the child's, never run here too.
    if not status:
        sys.stderr.write(f"{snakemake.rule}: the job server stopped before the job ended\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status) if status else 1)


def start(log_path: Path, python: str = sys.executable) -> subprocess.Popen | None:
    """Start this run's job server and wait until it listens; from then on, the jobs this
    process starts hand themselves over to it. None, with its log saying why, where it stopped
    or did not listen in time: the jobs then start their own Python."""
    run = str(os.getpid())
    path = socket_path(run)
    for folder in (path.parent, Path(log_path).parent):
        folder.mkdir(parents=True, exist_ok=True)
    # One thread each, so that importing numpy starts no BLAS thread a child would lack; a child
    # sets the job's own.
    one = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    with open(log_path, "w") as output:
        server = subprocess.Popen(
            [python, "-m", "d2lrepro.pipeline.job_server", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=os.environ | one,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_S
    while not path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            stop(server)
            return None
        time.sleep(0.05)
    os.environ[RUN] = run
    return server


def stop(server: subprocess.Popen | None) -> None:
    """Stop the job server (it stops what children still run) and wait for it; the jobs this
    process starts from now on start their own Python."""
    os.environ.pop(RUN, None)
    if server is None or server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(STOP_GRACE_S * 2)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def warm_up() -> dict[str, int]:
    """Import what scripts import: the libraries, then every module of this package; the
    package's files and their modification times, by which a later edit shows."""
    import matplotlib

    matplotlib.use("Agg")
    for name in WARM:
        importlib.import_module(name)
    package = importlib.import_module("d2lrepro")
    for module in pkgutil.walk_packages(package.__path__, "d2lrepro."):
        importlib.import_module(module.name)
    return sources()


def sources() -> dict[str, int]:
    """The modification time of each file of this package."""
    root = Path(__file__).resolve().parents[1]
    return {str(p): p.stat().st_mtime_ns for p in sorted(root.rglob("*.py"))}


def fork_safe() -> None:
    """Fail where the imports started what a forked child could not use: a second thread (a
    pool the child would lack), CUDA (lazily by torch, or the driver loaded)."""
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        raise RuntimeError(f"the job server runs {len(threads)} threads; it may fork only one")
    torch = sys.modules["torch"]
    if torch.cuda.is_initialized() or "libcuda" in Path("/proc/self/maps").read_text():
        raise RuntimeError("an import started CUDA in the job server; children could not use it")


def serve(path: Path) -> None:
    """Listen on ``path`` until the parent process ends or a SIGTERM comes; fork a child for
    each request, report its exit status, and stop its process group if its job's process goes
    away first."""
    imported = warm_up()
    fork_safe()
    gc.freeze()  # no child's collection then writes to (and so copies) the pages they share
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    binding = path.with_suffix(".binding")
    listener.bind(str(binding))
    listener.listen(64)
    binding.rename(path)  # the path appears once it accepts
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    stopping: dict[int, float] = {}  # children told to stop, and when they will be killed
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"job server {os.getpid()} listening on {path}", flush=True)
    try:
        while os.getppid() == parent:
            for key, _ in selector.select(timeout=0.5):
                if key.fileobj is listener:
                    accept(listener, selector, imported)
                elif key.data[0] == "job":  # the job's process is gone: stop its child
                    if key.fileobj.fileno() < 0:
                        continue  # closed: its child ended in this same round
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    stopping[key.data[1]] = time.monotonic() + STOP_GRACE_S
                    signal_group(key.data[1], signal.SIGTERM)
                else:  # a child ended
                    _, pid, client = key.data
                    status = shell_status(os.waitpid(pid, 0)[1])
                    selector.unregister(key.fileobj)
                    os.close(key.fileobj)
                    stopping.pop(pid, None)
                    if client.fileno() >= 0:
                        selector.unregister(client)
                        with contextlib.suppress(OSError):
                            client.send(str(status).encode())
                        client.close()
            for pid, deadline in list(stopping.items()):
                if time.monotonic() > deadline:
                    signal_group(pid, signal.SIGKILL)
                    del stopping[pid]
    finally:
        children = [k.data[1] for k in selector.get_map().values() if k.data and k.data[0] == "pid"]
        for pid in children:
            signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while children and time.monotonic() < deadline:
            children = [pid for pid in children if not os.waitpid(pid, os.WNOHANG)[0]]
            time.sleep(0.05)
        for pid in children:
            signal_group(pid, signal.SIGKILL)
        path.unlink(missing_ok=True)


def accept(listener: socket.socket, selector: selectors.BaseSelector, imported: dict) -> None:
    """Take one request: fork its child and watch both it and its job's process; refuse it
    where the package changed since the server imported it. A request that cannot be read or
    forked fails that job alone."""
    client, _ = listener.accept()
    fds = []
    try:
        message, fds, _, _ = socket.recv_fds(client, MAX_REQUEST, len(STREAMS))
        request = json.loads(message)
        if sources() != imported:
            client.send(REFUSED)
            raise RuntimeError("the package changed since the server imported it")
        open_files = [k.fileobj for k in selector.get_map().values()]
        pid = fork_child(request, fds, open_files + [client])
    except Exception as error:
        print(f"a request refused or failed: {error}", flush=True)
        for fd in fds:
            os.close(fd)
        client.close()
        return
    selector.register(client, selectors.EVENT_READ, ("job", pid))
    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, ("pid", pid, client))


def signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def shell_status(wait_status: int) -> int:
    """A child's exit status as a shell gives it: 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def fork_child(request: dict, fds: list[int], open_files: list) -> int:
    """Fork the child that runs ``request``'s script on the job's streams ``fds``; its pid (also
    its process group's). The child closes the server's sockets, ``open_files``."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    code = 1
    try:
        os.setsid()
        for file in open_files:
            if isinstance(file, int):
                os.close(file)
            else:
                file.close()
        for fd, stream in zip(fds, STREAMS):
            os.dup2(fd, stream)
            os.close(fd)
        code = run_script(request)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def run_script(request: dict) -> int:
    """Run a request's script as ``python script`` would in its folder and environment; its
    exit status."""
    import numpy
    import threadpoolctl
    import torch

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], **{CHILD: "1"})
    tempfile.tempdir = None  # the job's TMPDIR, not the server's
    # A fresh interpreter takes the job's threads (Snakemake sets them) as it starts.
    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count())
    torch.set_num_threads(threads)
    threadpoolctl.threadpool_limits(threads, user_api="blas")
    torch.seed()  # a fresh interpreter's generators start at random, each its own
    numpy.random.seed()
    sys.argv = request["argv"]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python script` has it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = exit_code(exit.code)
    except BaseException as error:
        sys.excepthook(type(error), error, error.__traceback__)
        code = 128 + signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    atexit._run_exitfuncs()  # what the interpreter runs as it exits: log handlers, temp files
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def exit_code(code) -> int:
    """The status ``sys.exit(code)`` gives the interpreter (a message is printed: 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code % 256
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
