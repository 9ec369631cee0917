"""Jobs that start warm: each script runs in a child forked from one server that has imported
torch, pandas, matplotlib and this package once, instead of in a fresh interpreter that imports
them again (seconds a job: most of a small job's time).

A run's first step starts the server (:func:`start`, from the workflow's ``onstart``); each
script's first statement is :func:`hand_over`, which sends the script, its working directory,
environment and standard streams to the server and waits for the child's exit status. The child
is a new session (killed whole with the job: when the job's process dies, the server stops the
child's process group), with the job's environment and the job's threads for torch, and runs
the script from its first line as the interpreter would. No child is forked after anything
started CUDA, a thread pool or a device in the server: it only imports.

Where no server answers (none started: ``job_server: false``, a dry run, ``--sdm conda``; a
cluster job on another node; a Python other than the server's), :func:`hand_over` returns and
the script runs in its own process, as it always could.

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
import time
from pathlib import Path

SOCKETS = Path(".snakemake") / "job_server"
# Set in a child and everything it starts (torchrun's workers, a spawned process), so that a
# script run again there runs in place instead of handing itself over once more.
CHILD = "D2LREPRO_JOB_SERVER_CHILD"
# What most scripts import: the server imports them once so that no child has to.
WARM = ("numpy", "pandas", "torch", "matplotlib", "seaborn")
MAX_REQUEST = 1 << 20
STREAMS = (0, 1, 2)
STOP_GRACE_S = 5.0


def socket_path(prefix: str = sys.prefix) -> Path:
    """Where the server for the Python installed at ``prefix`` listens, relative to the run's
    working directory: a job run by another Python (a conda environment) finds none."""
    return SOCKETS / f"{hashlib.sha1(prefix.encode()).hexdigest()[:12]}.sock"


def hand_over(snakemake) -> None:
    """Run this script in a child of the job server and exit with its status; return at once,
    to run it here, where no server answers or this process is already such a child."""
    if os.environ.get(CHILD):
        return
    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        client.connect(str(socket_path()))
        request = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(client, [json.dumps(request).encode()], list(STREAMS))
    except OSError:
        client.close()
        return  # no server answers: the script runs here
    # From here on the job is the child's: whatever happens, it never runs here as well.
    try:
        status = client.recv(16)
    except OSError:
        status = b""
    if not status:
        sys.stderr.write(f"{snakemake.rule}: the job server stopped before the job ended\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status) if status else 1)


def start(log_path: Path, python: str = sys.executable) -> subprocess.Popen:
    """Start this run's job server (it listens once its imports are done; until then, jobs
    run in place). It stops with the process that started it."""
    path = socket_path()
    for folder in (path.parent, Path(log_path).parent):
        folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a server of a run that was killed leaves its socket behind
    env = os.environ | dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [python, "-m", "d2lrepro.pipeline.job_server", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def stop(server: subprocess.Popen | None) -> None:
    """Stop the job server (it stops what children still run) and wait for it."""
    if server is None or server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(STOP_GRACE_S * 2)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def warm_up() -> None:
    """Import what scripts import: the libraries, then every module of this package."""
    import matplotlib

    matplotlib.use("Agg")
    for name in WARM:
        importlib.import_module(name)
    package = importlib.import_module("d2lrepro")
    for module in pkgutil.walk_packages(package.__path__, "d2lrepro."):
        importlib.import_module(module.name)


def cold_devices() -> None:
    """Fail where an import started CUDA: a forked child could not use it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("an import started CUDA in the job server; children could not use it")


def serve(path: Path) -> None:
    """Listen on ``path`` until the parent process ends or a SIGTERM comes; fork a child for
    each request, report its exit status, and stop its process group if its job's process
    goes away first."""
    warm_up()
    cold_devices()
    gc.freeze()  # no child's collection then writes to (and so copies) the pages they share
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(path))
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[socket.socket, int] = {}
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"job server {os.getpid()} listening on {path}", flush=True)
    try:
        while os.getppid() == parent:
            for key, _ in selector.select(timeout=0.5):
                if key.fileobj is listener:
                    client, _ = listener.accept()
                    children[client] = fork_child(client, listener, children)
                    selector.register(client, selectors.EVENT_READ)
                else:  # the job's process is gone: so is its job
                    kill_group(children.pop(key.fileobj))
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
            for client, pid in list(children.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    with contextlib.suppress(OSError):
                        client.send(str(shell_status(status)).encode())
                    selector.unregister(client)
                    client.close()
                    del children[client]
    finally:
        for pid in children.values():
            kill_group(pid)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def shell_status(wait_status: int) -> int:
    """A child's exit status as a shell gives it: 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def kill_group(pid: int) -> None:
    """Stop a child and everything it started: SIGTERM, then SIGKILL after a grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    for _ in range(int(STOP_GRACE_S * 10)):
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def fork_child(client: socket.socket, listener: socket.socket, others) -> int:
    """Fork the child that runs ``client``'s script; its pid (also its process group's)."""
    message, fds, _, _ = socket.recv_fds(client, MAX_REQUEST, len(STREAMS))
    request = json.loads(message)
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
        for sock in (listener, client, *others):
            sock.close()
        for fd, stream in zip(fds, STREAMS):
            os.dup2(fd, stream)
            os.close(fd)
        code = run_script(request)
    finally:
        os._exit(code)


def run_script(request: dict) -> int:
    """Run a request's script as ``python script`` would in its directory and environment;
    its exit status."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"], **{CHILD: "1"})
    # The server's torch started with one thread; a fresh interpreter takes the job's.
    torch = sys.modules["torch"]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
    sys.argv = request["argv"]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python script` has it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 0
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exit:
        code = exit_code(exit.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()
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
