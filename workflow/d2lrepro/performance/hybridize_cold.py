"""The book's cold loop of forward passes, eager against TorchScript, each pair of loops in a
fresh Python process (``hyb.bench.naive``).

TorchScript keeps what it compiled and profiled for a module's code for the rest of the
process, so in one process only the first scripted loop is cold. Each pair therefore runs in
a process of its own, as each run of the book's notebook did, and the pairs alternate which
loop runs first, since the first pays the process's own first-call costs.

The processes are forked from one server (:func:`fork_server`) that started Python and
imported torch once and has run nothing since: each child is the interpreter a fresh start
would give after those imports (nothing compiled, profiled or run; no device touched), without
paying them again, which took longer than the loops themselves.

Metrics: ``{name}.script_faster_pairs``, ``{name}.pairs``, ``{name}.script_faster_sign_p``,
``{name}.least_p``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import warnings

import torch

from d2lrepro.core.models import mlp
from d2lrepro.core.results import failed, least_sign_p, metric, sign_test_p
from d2lrepro.core.timing import naive_time

NAMES = ("script_faster_pairs", "pairs", "script_faster_sign_p", "least_p")
UNITS = ("", "", "p", "p")  # two counts, the test's p-value and the least it could give
TIMEOUT_S = 600  # one pair of loops: seconds on a laptop; a hung interpreter fails the pair


def cold_pair(order, seed: int, batch: int, n_calls: int, device: str, threads: int) -> dict:
    """Seconds of the book's loop of ``n_calls`` calls on a fresh MLP, eagerly and after
    torch.jit.script, in ``order``, in this process. The book's earlier cells run first, as in
    its notebook: another net called once on the same shape, then scripted and called once;
    so the process is warm, and the timed modules are not."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    x = torch.randn(batch, 512, device=device)
    book_earlier_cells(x, seed + 10_000)
    net = mlp(seed).to(device)
    loops = {"eager": net, "script": torch.jit.script(net)}
    return {
        mode: naive_time(lambda f=loops[mode]: [f(x) for _ in range(n_calls)], device, True)
        for mode in order
    }


@contextlib.contextmanager
def quiet_jit():
    # torch.jit warns that it is deprecated; TorchScript is what the book's section measures.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def book_earlier_cells(x: torch.Tensor, seed: int) -> None:
    """The cells the book's notebook runs before its timed loops: another net called once on
    ``x``, then scripted and called once. TorchScript's first call in a process costs more
    than any later module's first call, and the notebook had paid it before it timed."""
    earlier = mlp(seed).to(x.device)
    earlier(x)
    with quiet_jit():
        torch.jit.script(earlier)(x)


# The server: imports ``function`` once, then for each line of JSON arguments on stdin forks a
# child that calls it and sends back one line of JSON, {"result": ...} or {"error": ...}. What
# a child prints goes to stderr: stdout carries the replies.
FORK_SERVER = """
import gc, importlib, json, os, sys
module, name = sys.argv[1:]
function = getattr(importlib.import_module(module), name)
gc.freeze()  # so that no child's collection writes to (and so copies) the pages it shares
for line in sys.stdin:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        try:
            reply = {"result": function(*json.loads(line))}
        except Exception as error:
            reply = {"error": f"{type(error).__name__}: {error}"}
        os.write(write, json.dumps(reply).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as replied:
        reply = replied.read().decode()
    status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    print(reply or json.dumps({"error": f"the child ended with status {status}"}), flush=True)
"""


@contextlib.contextmanager
def fork_server(module: str, name: str, timeout: float = TIMEOUT_S):
    """A function that calls ``module.name`` with its arguments (JSON) in a child forked from
    one server process, returning its result; a child that raises or ends without replying
    raises RuntimeError. A call that takes over ``timeout`` seconds, a server that cannot
    start and a reply that is not one raise RuntimeError too, and stop the server and its
    child (they run in a process group of their own): every later call raises."""
    with tempfile.TemporaryFile("w+", errors="replace") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-c", FORK_SERVER, module, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        stopped = []  # why this side stopped the server, once it has

        def stop() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()

        def failure(otherwise: str) -> RuntimeError:
            """Why the call failed: why the server ended by itself (its last line on
            stderr), else ``otherwise``; the server is stopped."""
            if stopped:
                return RuntimeError(f"the server was stopped: {stopped[0]}")
            ended = server.poll() is not None
            stop()
            stderr.seek(0)
            lines = stderr.read().strip().splitlines()
            stopped.append(lines[-1] if ended and lines else otherwise)
            return RuntimeError(stopped[0])

        def call(*args):
            try:
                server.stdin.write(json.dumps(args) + "\n")
                server.stdin.flush()
            except (OSError, ValueError) as error:
                raise failure(f"the server is gone: {error}") from error
            if not select.select([server.stdout], [], [], timeout)[0]:
                raise failure(f"no reply in {timeout:g} s")
            line = server.stdout.readline()
            if not line:  # the end of its output: it is ending, and its stderr will say why
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(timeout=10)
                raise failure("the server ended without a reply")
            try:
                reply = json.loads(line)
            except ValueError as error:
                raise failure(f"not a reply: {line[:80]!r}") from error
            if "error" in reply:
                raise RuntimeError(reply["error"])
            return reply["result"]

        try:
            yield call
        finally:
            stop()


def cold_pairs(
    name: str, batch: int, n_calls: int, device, seed: int, pairs: int = 20, run=None
) -> list[dict]:
    """The sign test over ``pairs`` fresh processes, each timing the two cold loops of its own
    network (``run``, :func:`cold_pair`'s arguments to its seconds; by default a child of a
    :func:`fork_server`), of the scripted loop being the faster."""
    with contextlib.ExitStack() as stack:
        if run is None:
            run = stack.enter_context(fork_server(__name__, cold_pair.__name__))
        faster, threads = 0, torch.get_num_threads()
        for i in range(pairs):
            order = ("eager", "script") if i % 2 == 0 else ("script", "eager")
            try:
                seconds = run(order, seed + 1 + i, batch, n_calls, str(device), threads)
            except RuntimeError as error:
                why = f"the cold loop's process failed: {error}"
                return [failed(f"{name}.{m}", why, u) for m, u in zip(NAMES, UNITS)]
            faster += seconds["script"] < seconds["eager"]
    values = (faster, pairs, sign_test_p(faster, pairs))
    rows = [metric(f"{name}.{m}", v, u, str(device)) for m, v, u in zip(NAMES, values, UNITS)]
    more = "more pairs (hybridize.cold_pairs) give more, each a fresh Python process"
    return rows + [least_sign_p(f"{name}.least_p", pairs, "pairs", more, str(device))]
