"""Where a torch.compile's time went, as torch counts it, for the logs of the jobs that compile
(:mod:`.hybridize`, :mod:`.hybridize_first_compile`): its ``dynamo_timed`` phases (tracing,
graph passes, code generation, ``compile_file`` for the C++ compiler, loading), nested, so that
a phase includes the phases run inside it. It serves no ledger id: what it finds goes to the
logs only."""

from __future__ import annotations

import contextlib
import logging


def seconds() -> dict[str, float]:
    """The seconds torch.compile has spent in this process so far, by phase; none where this
    torch does not count them so (a private function of torch's)."""
    try:
        from torch._dynamo.utils import compile_times

        names, values = compile_times(repr="csv", aggregate=True)
        return {name: float(value) for name, value in zip(names, values, strict=True)}
    except Exception:  # noqa: BLE001 -- a log line lost, not the timings
        return {}


def slowest(before: dict[str, float], after: dict[str, float], least: float = 0.5) -> str:
    """The phases that took at least ``least`` seconds between two :func:`seconds`, in torch's
    order."""
    if not after:
        return "torch counted none"
    spent = {name: seconds - before.get(name, 0.0) for name, seconds in after.items()}
    slow = [f"{name} {seconds:.1f} s" for name, seconds in spent.items() if seconds >= least]
    return ", ".join(slow) or f"none took {least} s"


def since(before: dict[str, float]) -> str:
    """The slowest phases since ``before`` (a :func:`seconds`)."""
    return slowest(before, seconds())


@contextlib.contextmanager
def logged(log: logging.Logger, what: str, counted: bool = True):
    """Log the slowest phases of the compiles run inside, as ``what``'s (where ``counted``)."""
    before = seconds() if counted else {}
    try:
        yield
    finally:
        if counted:
            log.info("%s: torch.compile's phases: %s", what, since(before))
