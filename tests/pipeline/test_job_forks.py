"""The job server's process (d2lrepro.pipeline.job_forks): it refuses a job once the package
changed, forks only from one thread and no CUDA, and gives exit statuses as a shell does. Its
jobs run end to end in tests/pipeline/test_job_server.py."""

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys

import pytest

from d2lrepro.pipeline import job_forks, job_server


def in_server_env(*args, cwd=None):
    """Python run with ``args`` in the job server's environment, to its end."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=os.environ | job_server.SERVER_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_server_whose_package_changed_refuses_a_job_which_runs_in_place(tmp_path):
    path = str(tmp_path / "server.sock")
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)) as listener:
        listener.bind(path)
        listener.listen(1)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(path)
        socket.send_fds(client, [b"{}"], [0, 1, 2])
        selector = selectors.DefaultSelector()
        job_forks.accept(listener, selector, imported={"module.py": 0})
        assert client.recv(16) == job_server.REFUSED and not selector.get_map()
        client.close()


def test_a_file_that_vanishes_as_it_is_read_counts_as_a_change(monkeypatch):
    imported = job_forks.sources()
    assert not job_forks.changed(imported)

    def renamed():
        raise FileNotFoundError("module.py")

    monkeypatch.setattr(job_forks, "sources", renamed)
    assert job_forks.changed(imported)


def test_the_server_forks_only_from_one_thread_and_names_the_others():
    check = (
        "import ctypes, threading, time, torch\n"
        "from d2lrepro.pipeline import job_forks\n"
        "job_forks.fork_safe()\n"
        "named = threading.Event()\n"
        "def sleeper():\n"
        "    ctypes.CDLL(None).prctl(15, b'sleeper', 0, 0, 0)  # PR_SET_NAME, as libraries do\n"
        "    named.set()\n"
        "    time.sleep(30)\n"
        "threading.Thread(target=sleeper, name='napper', daemon=True).start()\n"
        "named.wait()\n"
        "job_forks.fork_safe('sleepy')\n"
    )
    done = in_server_env("-c", check)
    assert done.returncode == 1, done.stderr
    error = done.stderr.rstrip().splitlines()[-1]
    assert error.startswith("RuntimeError: the job server runs 2 threads after importing sleepy (")
    assert error.endswith(", sleeper; of them started by Python: napper); it may fork only one")


def test_the_server_s_imports_ask_cuda_nothing(tmp_path):
    """Asked for its devices, the CUDA driver starts a thread of its own, after which the server
    may not fork: none of the modules it imports asks. torch.utils.cpp_extension asks as it is
    imported by a CUDA build of torch that finds CUDA's files (as torch.utils.benchmark imports
    it), so the package imports that where it times. This torch answers as such a build once
    the libraries are imported (as a CUDA build, torch._dynamo would not import here)."""
    check = (
        "import importlib, os, torch\n"
        "from d2lrepro.pipeline import job_forks\n"
        "for name in job_forks.WARM:\n"
        "    importlib.import_module(name)\n"
        "def asked(*args, **kwargs):\n"
        "    raise AssertionError('an import asked CUDA for its devices')\n"
        "torch.cuda.is_available = torch.cuda.device_count = asked\n"
        "torch.accelerator.is_available = torch.accelerator.device_count = asked\n"
        "torch.cuda._is_compiled = lambda: True\n"
        "torch.version.cuda = '13.0'\n"
        f"os.environ['CUDA_HOME'] = {str(tmp_path)!r}\n"
        "job_forks.warm_up()\n"
    )
    done = in_server_env("-c", check)
    assert done.returncode == 0, done.stderr


def test_where_pyarrow_is_installed_the_server_s_imports_start_no_thread():
    """pandas imports pyarrow where it is installed, whose allocator (jemalloc) starts a
    background thread unless the server's environment says otherwise."""
    pytest.importorskip("pyarrow")
    check = (
        "import pandas, pyarrow\n"
        "from d2lrepro.pipeline import job_forks\n"
        "pyarrow.array(range(10**6))\n"
        "print(job_forks.thread_names())\n"
    )
    done = in_server_env("-c", check)
    assert done.returncode == 0, done.stderr
    assert len(eval(done.stdout)) == 1, done.stdout


def test_exit_statuses_read_as_a_shell_reads_them():
    assert [job_forks.exit_code(c) for c in (None, 0, 3, 256)] == [0, 0, 3, 0]
    assert job_forks.exit_code("a message") == 1
    killed = subprocess.run(["sh", "-c", "kill -TERM $$"])
    assert killed.returncode == -signal.SIGTERM
    assert job_forks.shell_status(signal.SIGTERM) == 128 + signal.SIGTERM
    assert job_forks.shell_status(3 << 8) == 3


def test_a_server_whose_run_is_gone_stops_and_removes_its_socket(tmp_path):
    """Process 1 is not its parent: the run that started it has ended (or never was)."""
    done = in_server_env("-m", "d2lrepro.pipeline.job_forks", "server.sock", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "listening" in done.stdout and not list(tmp_path.iterdir())
