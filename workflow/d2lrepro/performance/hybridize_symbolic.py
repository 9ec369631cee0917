"""Imperative against symbolic programming (``hyb.fancy_func``, ``hyb.symbolic``): the
book's fancy_func called as Python, and the same program written as text by evoke_(),
compiled and executed, each as the book's cell prints it.

Metrics: ``imperative.result``, ``symbolic.result`` (book: 10).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

from d2lrepro.core.results import metric


def add(a, b):
    return a + b


def fancy_func(a, b, c, d):
    e = add(a, b)
    f = add(c, d)
    g = add(e, f)
    return g


def add_():
    return """
def add(a, b):
    return a + b
"""


def fancy_func_():
    return """
def fancy_func(a, b, c, d):
    e = add(a, b)
    f = add(c, d)
    g = add(e, f)
    return g
"""


def evoke_():
    return add_() + fancy_func_() + "print(fancy_func(1, 2, 3, 4))"


def _printed(cell: Callable[[], None]) -> str:
    """What ``cell`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cell()
    return out.getvalue()


def imperative_vs_symbolic() -> tuple[list[dict], str]:
    """The book's two cells, run as it writes them: print(fancy_func(1, 2, 3, 4)), and the
    program that evoke_() generates, printed, compiled and executed; each result is the last
    line the cell prints. Returns the rows and what the symbolic cell printed."""

    def symbolic():
        prog = evoke_()
        print(prog)
        y = compile(prog, "", "exec")
        # Its own namespace, as a notebook's: the program's fancy_func calls the program's add,
        # never this module's.
        exec(y, {})

    imperative = _printed(lambda: print(fancy_func(1, 2, 3, 4)))
    printed = _printed(symbolic)
    rows = [
        metric("imperative.result", float(imperative.splitlines()[-1])),
        metric("symbolic.result", float(printed.splitlines()[-1])),
    ]
    return rows, printed
