"""Once a run has started, a SIGTERM no longer hangs Snakemake (d2lrepro.pipeline.stopping):
Snakemake's own handler, which takes the scheduler's lock, runs in a thread of its own, not in
the main thread that may hold that lock."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from d2lrepro.pipeline import stopping

# A workflow whose one job ends without its output: Snakemake's main thread then waits, under
# its scheduler's lock, for the file to appear (--latency-wait), and a SIGTERM comes meanwhile.
LATE_OUTPUT = """
onstart:
    from d2lrepro.pipeline import stopping
    stopping.sigterm_in_a_thread()

rule late:
    output: "late.txt"
    shell: "true"
"""


class SnakemakesHandler:
    """A SIGTERM handler that, as Snakemake's scheduler's, takes a lock; it gives up after 2 s,
    where Snakemake's would wait for good. ``again``: its first run sends another SIGTERM while
    it holds the lock, as `timeout` sends one to its command, then one to the process group."""

    def __init__(self, again=False):
        self.lock, self.again, self.runs = threading.Lock(), again, []

    def __call__(self, signum, frame):
        if not self.lock.acquire(timeout=2):
            return
        try:
            self.runs.append(threading.current_thread().name)
            if self.again and len(self.runs) == 1:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)
        finally:
            self.lock.release()

    def held_the_lock(self, times):
        deadline = time.monotonic() + 5
        while len(self.runs) < times and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.runs) == times


@pytest.fixture
def install():
    """Installs a SIGTERM handler for the test; the earlier one is back after it."""
    earlier = signal.getsignal(signal.SIGTERM)
    yield lambda handler: signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGTERM, earlier)


def test_a_sigterm_while_the_main_thread_holds_the_lock_stops_once_it_lets_go(install):
    handler = SnakemakesHandler()
    install(handler)
    stopping.sigterm_in_a_thread()
    with handler.lock:
        os.kill(os.getpid(), signal.SIGTERM)  # handled in this thread, which holds the lock
        time.sleep(0.5)
        assert handler.runs == []
    assert handler.held_the_lock(1) and handler.runs == ["sigterm"]


def test_a_second_sigterm_during_the_first_s_handler_stops_too(install):
    handler = SnakemakesHandler(again=True)
    install(handler)
    stopping.sigterm_in_a_thread()
    os.kill(os.getpid(), signal.SIGTERM)
    assert handler.held_the_lock(2) and handler.runs == ["sigterm", "sigterm"]


def test_without_a_handler_nothing_changes(install):
    install(signal.SIG_DFL)
    stopping.sigterm_in_a_thread()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_snakemake_stops_on_a_sigterm_that_comes_while_it_waits_for_a_late_output(tmp_path):
    """Without the thread, Snakemake 9 never ends here: its handler waits for the lock that its
    own main thread holds while it waits out --latency-wait. With it, the run ends once the
    wait does."""
    (tmp_path / "Snakefile").write_text(LATE_OUTPUT)
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--latency-wait", "6"]
    log = tmp_path / "snakemake.log"
    with open(log, "w") as out:
        run = subprocess.Popen(command, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "Waiting at most" not in log.read_text():
            assert run.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=20)
    finally:
        run.kill()
    assert run.returncode == 1, log.read_text()  # the job failed: its output never came
