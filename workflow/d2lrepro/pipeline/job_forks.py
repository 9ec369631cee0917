"""The job server's own process (:mod:`d2lrepro.pipeline.job_server` starts it): it imports
what the scripts import, once, then forks a child for each job that hands itself over, and runs
the job's script there as a fresh ``python script`` would, on the job's streams, environment,
folder and threads. ``python -m d2lrepro.pipeline.job_forks SOCKET RUN``: listen on SOCKET while
process RUN (the run's Snakemake) lives."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import pkgutil
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from d2lrepro.pipeline.job_server import CHILD, REFUSED, STOP_GRACE_S, STREAMS

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
MAX_REQUEST = 1 << 20


def warm_up() -> dict[str, int]:
    """Import what scripts import: the libraries, then every module of this package; the
    package's files and their modification times, by which a later edit shows."""
    before = sources()  # an edit during the imports shows as one after them
    import matplotlib

    matplotlib.use("Agg")
    for name in WARM:
        importlib.import_module(name)
        fork_safe(name)
    package = importlib.import_module("d2lrepro")
    for module in pkgutil.walk_packages(package.__path__, "d2lrepro."):
        importlib.import_module(module.name)
        fork_safe(module.name)
    return before


def sources() -> dict[str, int]:
    """The modification time of each file of this package."""
    root = Path(__file__).resolve().parents[1]
    return {str(p): p.stat().st_mtime_ns for p in sorted(root.rglob("*.py"))}


def fork_safe(imported: str | None = None) -> None:
    """Fail where the imports, up to ``imported`` where it is named, started what a forked child
    could not use: a second thread (a pool the child would lack; the CUDA driver starts one as
    soon as it is asked for its devices), or CUDA."""
    after = f" after importing {imported}" if imported else ""
    threads = thread_names()
    if len(threads) != 1:
        started = ", ".join(
            t.name for t in threading.enumerate() if t is not threading.main_thread()
        )
        by_python = f"; of them started by Python: {started}" if started else ""
        raise RuntimeError(
            f"the job server runs {len(threads)} threads{after} ({', '.join(threads)}"
            f"{by_python}); it may fork only one"
        )
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError(
            f"an import started CUDA in the job server{after}; children could not use it"
        )


def thread_names() -> list[str]:
    """The kernel's name of each thread of this process that is still running (a library's own
    threads name themselves: jemalloc_bg_thd, cuda-EvtHandlr; a thread Python started bears the
    process's name)."""
    names = []
    for task in sorted(os.listdir("/proc/self/task"), key=int):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
    return names


def serve(path: Path, run: int) -> dict | None:
    """Listen on ``path`` while process ``run`` (the run's Snakemake, its parent) lives and no
    SIGTERM came; fork a child for each request, report its exit status, and stop its process
    group if its job's process goes away first. Returns None in the server; in a child, the
    request it is to run (:func:`run_script`), once it has left the server's loop."""
    server = os.getpid()
    imported = warm_up()  # a SIGTERM meanwhile ends it at once: it has nothing to clean up
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    gc.freeze()  # no child's collection then writes to (and so copies) the pages they share
    os.close(
        os.pidfd_open(os.getpid())
    )  # children are watched through pidfds: fail here, not later
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    binding = path.with_suffix(".binding")
    binding.unlink(missing_ok=True)
    listener.bind(str(binding))
    listener.listen(64)
    binding.rename(path)  # the path appears once it accepts
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    stopping: dict[int, float] = {}  # children told to stop, and when they will be killed
    print(f"job server {os.getpid()} listening on {path}", flush=True)
    try:
        while not stopped and os.getppid() == run:
            for key, _ in selector.select(timeout=0.5):
                if key.fileobj is listener:
                    request = accept(listener, selector, imported)
                    if request is not None:  # this is the child: it leaves the loop
                        selector.close()
                        return request
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
        if os.getpid() == server:
            stop_children(selector, path)
    return None


def stop_children(selector: selectors.BaseSelector, path: Path) -> None:
    """Stop the server's children that still run (SIGTERM, then SIGKILL after
    :data:`STOP_GRACE_S`) and remove its socket."""
    children = [k.data[1] for k in selector.get_map().values() if k.data and k.data[0] == "pid"]
    for pid in children:
        signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if not reaped(pid)]
        time.sleep(0.05)
    for pid in children:
        signal_group(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)


def accept(
    listener: socket.socket, selector: selectors.BaseSelector, imported: dict
) -> dict | None:
    """Take one request: fork its child and watch both it and its job's process; refuse it
    where the package changed since the server imported it. A request that cannot be read or
    forked fails that job alone. Returns the request in the child, None in the server."""
    client, _ = listener.accept()
    fds = []
    try:
        message, fds, _, _ = socket.recv_fds(client, MAX_REQUEST, len(STREAMS))
        request = json.loads(message)
        if changed(imported):
            client.send(REFUSED)
            raise RuntimeError("the package changed since the server imported it")
        open_files = [k.fileobj for k in selector.get_map().values()]
        pid = fork_child(fds, open_files + [client])
    except Exception as error:
        print(f"a request refused or failed: {error}", flush=True)
        for fd in fds:
            os.close(fd)
        client.close()
        return None
    if pid == 0:
        return request
    try:
        watched = os.pidfd_open(pid)
    except OSError as error:  # a child it cannot watch would outlive its job: stop it now
        print(f"a job stopped: its child cannot be watched: {error}", flush=True)
        signal_group(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        client.close()
        return None
    selector.register(client, selectors.EVENT_READ, ("job", pid))
    selector.register(watched, selectors.EVENT_READ, ("pid", pid, client))
    return None


def changed(imported: dict[str, int]) -> bool:
    """Whether the package's files differ from those the server imported (one being renamed
    or removed as they are read counts)."""
    try:
        return sources() != imported
    except OSError:
        return True


def reaped(pid: int) -> bool:
    """Whether child ``pid`` has ended (and is now reaped)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


def signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def shell_status(wait_status: int) -> int:
    """A child's exit status as a shell gives it: 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


# prctl's option that sends the calling process a signal when its parent ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def fork_child(fds: list[int], open_files: list) -> int:
    """Fork the child that runs a request's script on the job's streams ``fds``: its pid (also
    its process group's) in the server, 0 in the child. The child closes the server's sockets,
    ``open_files``, and is stopped (SIGTERM) if the server ends before it."""
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:
        os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != server:  # the server ended before the signal was asked for
            os._exit(128 + signal.SIGTERM)
        for file in open_files:
            if isinstance(file, int):
                os.close(file)
            else:
                file.close()
        for fd, stream in zip(fds, STREAMS):
            os.dup2(fd, stream)
            os.close(fd)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    return 0


def run_script(request: dict) -> int:
    """Run a request's script as ``python script`` would in its folder and environment; its
    exit status. The caller exits the interpreter with it (``sys.exit``), which then does what
    it does for any script: waits for its threads, runs its exit functions."""
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
    child_request = serve(Path(sys.argv[1]), int(sys.argv[2]))
    if child_request is not None:  # a child, out of the server's loop: it exits as Python does
        sys.exit(run_script(child_request))
