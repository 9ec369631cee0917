"""The job server (d2lrepro.pipeline.job_server): a script hands itself over to a child forked
from a server that imported torch once, with the job's streams, environment, threads and exit
status; it runs in place where no server answers; a job killed takes its child with it."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from d2lrepro.pipeline import job_server

# A workflow script as the server runs it: Snakemake's preamble gives it `snakemake`.
SCRIPT = """
import os, sys, tempfile, types
snakemake = types.SimpleNamespace(rule="a_rule", params={"ran_alone": "RAN_ALONE" in os.environ})
from d2lrepro.pipeline import job_server
job_server.hand_over(snakemake)
if sys.argv[1] == "why":  # where it runs and why, before the imports a job's time includes
    print(os.environ.get("D2LREPRO_JOB_SERVER_CHILD"), job_server.why_here, sep="\\n")
    sys.exit()
import threadpoolctl, torch
blas = threadpoolctl.threadpool_info()[0]["num_threads"]
print(os.environ.get("D2LREPRO_JOB_SERVER_CHILD"), os.getppid(), torch.get_num_threads(), blas)
print(tempfile.gettempdir(), torch.initial_seed())
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "fail":
    raise ValueError("a failing job")
if mode == "exit":
    sys.exit(3)
if mode == "threads":  # work left to threads the script does not wait for
    import threading, time
    from concurrent.futures import ThreadPoolExecutor
    def late(text):
        time.sleep(0.5)
        open(sys.argv[2], "a").write(text + "\\n")  # the two write in either order
    threading.Thread(target=late, args=("thread",)).start()
    ThreadPoolExecutor(1).submit(late, "pool")
if mode == "cuda":
    print("cuda", float(torch.ones(2, device="cuda").sum()))
if mode == "sleep":
    open(sys.argv[2], "w").write(str(os.getpid()))
    import time
    time.sleep(120)
"""


def waited(condition, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A job server listening in a run directory of its own, and that directory."""
    workdir = tmp_path_factory.mktemp("run")
    (workdir / "script.py").write_text(SCRIPT)
    with contextlib.chdir(workdir):
        process = job_server.start(workdir / "logs" / "job_server.log")
    process.watcher.join()
    assert process.poll() is None, (workdir / "logs" / "job_server.log").read_text()
    yield process, workdir
    job_server.stop(process)


def run_script(workdir, *args, **env):
    return subprocess.run(
        [sys.executable, "script.py", *args],
        cwd=workdir,
        env=os.environ | {"OMP_NUM_THREADS": "2"} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_script_runs_in_a_child_of_the_server_with_the_job_s_streams_and_threads(
    server, tmp_path
):
    process, workdir = server
    done = run_script(workdir, "ok", TMPDIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    child, parent, torch_threads, blas_threads, tmp, seed = done.stdout.split()
    assert [child, parent, torch_threads, blas_threads] == ["1", str(process.pid), "2", "2"]
    assert tmp == str(tmp_path) and done.stderr == "to stderr\n"
    one = run_script(workdir, "ok", OMP_NUM_THREADS="1").stdout.split()
    assert one[2:4] == ["1", "1"] and one[5] != seed  # each child's generator seeded anew


@pytest.mark.cuda
def test_where_there_is_cuda_the_server_forks_and_its_child_uses_the_gpu(server):
    """The server listens only where its imports started no thread and no CUDA (the fixture
    shows its log where it does not: the threads it found, by name)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA, this machine has none")
    _, workdir = server
    done = run_script(workdir, "cuda")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "1" and "cuda 2.0" in done.stdout


def test_the_job_s_exit_status_and_traceback_come_back(server):
    _, workdir = server
    assert run_script(workdir, "exit").returncode == 3
    failed = run_script(workdir, "fail")
    assert failed.returncode == 1
    assert failed.stderr.rstrip().endswith("ValueError: a failing job")


def test_the_child_waits_for_the_script_s_threads_as_an_interpreter_exits(server, tmp_path):
    """Python joins a script's non-daemon threads and its executors' workers before it exits;
    so does the child, else their work is lost."""
    _, workdir = server
    done = run_script(workdir, "threads", str(tmp_path / "late"))
    assert done.returncode == 0, done.stderr
    assert sorted((tmp_path / "late").read_text().split()) == ["pool", "thread"]


def test_a_script_runs_in_place_where_no_server_answers(server, tmp_path):
    _, workdir = server
    (tmp_path / "script.py").write_text(SCRIPT)
    alone = run_script(tmp_path, "ok")
    assert alone.returncode == 0 and alone.stdout.split()[:2] == ["None", str(os.getpid())]
    # A stale socket, left by a server that was killed, answers nothing either.
    stale = job_server.socket_path(os.environ[job_server.RUN])
    (tmp_path / stale).parent.mkdir(parents=True)
    with contextlib.chdir(tmp_path), contextlib.closing(socket.socket(socket.AF_UNIX)) as dead:
        dead.bind(str(stale))  # relative: an absolute path here is longer than a socket's may be
    assert run_script(tmp_path, "ok").stdout.split()[0] == "None"
    # A process the child started runs the script again in place, not through the server.
    inside = run_script(workdir, "ok", D2LREPRO_JOB_SERVER_CHILD="1")
    assert inside.stdout.split()[:2] == ["1", str(os.getpid())]


def test_a_killed_job_takes_its_child_with_it(server, tmp_path):
    _, workdir = server
    pid_file = tmp_path / "child.pid"
    client = subprocess.Popen(
        [sys.executable, "script.py", "sleep", str(pid_file)],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert waited(pid_file.exists)
    assert waited(lambda: pid_file.read_text() != "")
    child = int(pid_file.read_text())
    client.send_signal(signal.SIGKILL)
    client.wait()
    assert waited(lambda: not alive(child), timeout=15)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_request_cut_short_fails_alone(server):
    process, workdir = server
    path = job_server.socket_path(os.environ[job_server.RUN])
    with contextlib.chdir(workdir), socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
        client.connect(str(path))
    assert run_script(workdir, "ok").stdout.split()[:2] == ["1", str(process.pid)]


def test_stopping_the_server_removes_its_socket_and_lets_jobs_start_their_own(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(job_server.RUN, raising=False)
    with contextlib.chdir(tmp_path):
        process = job_server.start(tmp_path / "server.log")
    process.watcher.join()
    path = tmp_path / job_server.socket_path(os.environ[job_server.RUN])
    assert path.exists() and not job_server.starting_path(path).exists()
    job_server.stop(process)
    assert process.returncode == 0 and not path.exists() and job_server.RUN not in os.environ
    assert "listening" in (tmp_path / "server.log").read_text()


def test_a_server_that_cannot_start_says_why_and_leaves_the_jobs_their_own_python(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv(job_server.RUN, raising=False)
    monkeypatch.delenv(job_server.STARTING, raising=False)
    with contextlib.chdir(tmp_path):
        process = job_server.start(tmp_path / "server.log", python="/bin/false")
        process.watcher.join()
        assert "(exit status 1): each job starts its own" in capsys.readouterr().err
        failing = tmp_path / "python"
        for body, why in [
            ("echo 'RuntimeError: it may fork only one'; exit 1", "exit status 1: RuntimeError"),
            ("echo 'importing'; kill -KILL $$", "killed by SIGKILL"),
        ]:
            failing.write_text(f"#!/bin/sh\nsleep 1\n{body}\n")
            failing.chmod(0o755)
            started = time.monotonic()
            process = job_server.start(tmp_path / "server.log", python=str(failing))
            # it returns while the server imports, and the jobs that time wait for it; the
            # environment names no server until one listens
            assert time.monotonic() - started < 0.5 and os.environ[job_server.STARTING]
            assert job_server.RUN not in os.environ
            assert list(tmp_path.rglob("*.starting"))
            process.watcher.join()
            assert f"({why}" in capsys.readouterr().err
            assert not list(tmp_path.rglob("*.starting"))
    # the jobs find no server named: they start their own Python
    assert job_server.RUN not in os.environ and job_server.STARTING not in os.environ
    job_server.stop(process)
    assert job_server.RUN not in os.environ


def test_while_the_server_imports_only_the_jobs_that_time_wait_for_it(tmp_path):
    """The others run in their own Python at once; a job that times runs once the server
    listens or stops (here it stops: the job then runs in its own Python too)."""
    (tmp_path / "script.py").write_text(SCRIPT)
    run = "12345"
    starting = tmp_path / job_server.starting_path(job_server.socket_path(run))
    starting.parent.mkdir(parents=True)
    for env, waits, why in [
        ({}, False, "the job server was still importing"),
        ({"RAN_ALONE": "1"}, True, "no job server answered"),
    ]:
        starting.touch()
        threading.Timer(2.0, starting.unlink).start()
        started = time.monotonic()
        # no server named yet (the module's own server, named in this process, is not this run's)
        done = run_script(tmp_path, "why", **{job_server.RUN: "", job_server.STARTING: run} | env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["None", why]  # in its own Python
        assert (time.monotonic() - started >= 2.0) is waits
        waited(lambda: not starting.exists())


@pytest.mark.parametrize(
    "local, deployment, touch, wanted",
    [
        (True, None, False, sys.platform == "linux"),  # proven on Linux only
        (False, None, False, False),  # a cluster runs the jobs
        (True, "conda", False, False),  # each job in its own environment's Python
        (True, None, True, False),  # --touch runs no job
    ],
)
def test_a_server_starts_only_where_this_python_runs_the_jobs(local, deployment, touch, wanted):
    from types import SimpleNamespace

    import snakemake.api  # noqa: F401  (snakemake.workflow imports in this order only)
    from snakemake.workflow import Workflow

    workflow = SimpleNamespace(
        local_exec=local,
        deployment_settings=SimpleNamespace(deployment_method={deployment} - {None}),
        touch=touch,
    )
    assert job_server.wanted(workflow) is wanted
    # the attributes it reads are Snakemake's own
    assert all(isinstance(getattr(Workflow, a), property) for a in ("local_exec", "touch"))


def test_where_the_socket_type_is_missing_the_script_runs_in_place(monkeypatch):
    """On a system without AF_UNIX SEQPACKET sockets (macOS), creating the socket fails: the
    job runs in its own Python instead of failing."""
    from types import SimpleNamespace

    def refused(*args):
        raise OSError(93, "Protocol not supported")

    monkeypatch.setenv(job_server.RUN, "12345")
    monkeypatch.delenv(job_server.CHILD, raising=False)
    monkeypatch.setattr(socket, "socket", refused)
    job_server.hand_over(SimpleNamespace(rule="a_rule", params={}))
    assert job_server.why_here == "no job server answered"


def test_a_child_does_not_outlive_its_server(tmp_path, monkeypatch):
    """Killed outright, the server leaves no child behind: each child asked the kernel for a
    SIGTERM when the server ends, and its job's process fails."""
    monkeypatch.delenv(job_server.RUN, raising=False)
    (tmp_path / "script.py").write_text(SCRIPT)
    with contextlib.chdir(tmp_path):
        process = job_server.start(tmp_path / "server.log")
    process.watcher.join()
    assert process.poll() is None, (tmp_path / "server.log").read_text()
    pid_file = tmp_path / "child.pid"
    try:
        client = subprocess.Popen(
            [sys.executable, "script.py", "sleep", str(pid_file)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waited(lambda: pid_file.exists() and pid_file.read_text())
        child = int(pid_file.read_text())
        process.kill()
        process.wait()
        assert client.wait(60) == 1
        assert "the job server stopped before the job ended" in client.stderr.read()

        def gone():
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            return Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"

        assert waited(gone, 30)
    finally:
        job_server.stop(process)
