"""The book's cold loop of forward passes, eager against TorchScript, each pair of loops in a
fresh Python process (``hyb.bench.naive``).

TorchScript keeps what it compiled and profiled for a module's code for the rest of the
process, so in one process only the first scripted loop is cold. Each pair therefore runs in
a new interpreter, as each run of the book's notebook did, and the pairs alternate which loop
runs first, since the first pays the process's own first-call costs.

Metrics: ``{name}.script_faster_pairs``, ``{name}.pairs``, ``{name}.script_faster_sign_p``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from d2lrepro.core.models import mlp
from d2lrepro.core.results import failed, metric, sign_test_p
from d2lrepro.core.timing import naive_time

NAMES = ("script_faster_pairs", "pairs", "script_faster_sign_p")
UNITS = ("", "", "p")  # two counts and a p-value
TIMEOUT_S = 600  # one pair of loops: seconds on a laptop; a hung interpreter fails the pair


def cold_pair(order, seed: int, batch: int, n_calls: int, device: str, threads: int) -> dict:
    """Seconds of the book's loop of ``n_calls`` calls on a fresh MLP, eagerly and after
    torch.jit.script, in ``order``, in this process. The book's earlier cells run first, as in
    its notebook: another net called once on the same shape, then scripted and called once;
    so the process is warm, and the timed modules are not."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    x = torch.randn(batch, 512, device=device)
    earlier = mlp(seed + 10_000).to(device)
    earlier(x)
    torch.jit.script(earlier)(x)
    net = mlp(seed).to(device)
    loops = {"eager": net, "script": torch.jit.script(net)}
    return {
        mode: naive_time(lambda f=loops[mode]: [f(x) for _ in range(n_calls)], device, True)
        for mode in order
    }


def in_fresh_process(*args) -> dict:
    """:func:`cold_pair` of ``args`` run by a new Python interpreter."""
    code = (
        "import json; from d2lrepro.performance.hybridize_cold import cold_pair; "
        f"print(json.dumps(cold_pair(*{args!r})))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S
        )
        if done.returncode:
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            raise RuntimeError(lines[-1])
        return json.loads(done.stdout.splitlines()[-1])
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError, IndexError) as error:
        raise RuntimeError(f"the cold loop's process failed: {error}") from error


def cold_pairs(
    name: str, batch: int, n_calls: int, device, seed: int, pairs: int = 5, run=in_fresh_process
) -> list[dict]:
    """The sign test over ``pairs`` fresh processes, each timing the two cold loops of its own
    network (``run``: :func:`in_fresh_process`), of the scripted loop being the faster."""
    faster = 0
    for i in range(pairs):
        order = ("eager", "script") if i % 2 == 0 else ("script", "eager")
        try:
            seconds = run(order, seed + 1 + i, batch, n_calls, str(device), torch.get_num_threads())
        except RuntimeError as error:
            return [failed(f"{name}.{m}", str(error), u) for m, u in zip(NAMES, UNITS)]
        faster += seconds["script"] < seconds["eager"]
    values = (faster, pairs, sign_test_p(faster, pairs))
    return [metric(f"{name}.{m}", v, u, str(device)) for m, v, u in zip(NAMES, values, UNITS)]
