"""A SIGTERM that stops a run whenever it comes.

On SIGTERM, Snakemake (9.x) stops gracefully: its scheduler's handler takes the scheduler's
lock, marks the run as stopping and wakes the scheduler, which starts no new job and exits once
the running ones end. Python runs a signal handler in the main thread, between two steps of
whatever that thread was doing. Where that is the scheduler's own work under the same lock (ending
a job, handling a failed one, waiting for a job's late output files), or the handler of an earlier
SIGTERM (GNU ``timeout`` sends one to Snakemake, then one to its whole process group), the handler
waits for a lock its own thread holds, and the run hangs for good. Run in a thread of its own, the
handler waits until the scheduler lets go of the lock, and the run stops as Snakemake means it to.
"""

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
