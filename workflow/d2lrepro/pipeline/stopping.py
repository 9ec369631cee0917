"""Once a run has started, a SIGTERM no longer hangs Snakemake: its handler (9.x) takes the
scheduler's lock, and Python runs a handler in the main thread, which may hold that lock or be
running the handler of an earlier SIGTERM; run in a thread of its own, the handler waits for the
lock instead of for itself (docs/experiments.md, "Interrupted runs")."""

import signal
import threading


def sigterm_in_a_thread() -> None:
    """Make the SIGTERM handler installed now (Snakemake's scheduler installs its own before the
    workflow's ``onstart`` runs) run in a new thread at each SIGTERM, so that the main thread
    never waits on it."""
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler):  # the default action or ignored: nothing that could wait
        return

    def start_handler(signum, frame):
        threading.Thread(target=handler, args=(signum, frame), name="sigterm", daemon=True).start()

    signal.signal(signal.SIGTERM, start_handler)
