"""Logging for workflow scripts: progress and tracebacks go to the rule's log file."""

from __future__ import annotations

import logging
import sys
import time


def setup(path: str) -> logging.Logger:
    """Send log records to ``path``; an uncaught exception is logged there and still raised."""
    logging.basicConfig(
        filename=path,
        filemode="w",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    previous = sys.excepthook

    def log_then_raise(kind, value, traceback):
        logging.getLogger("d2lrepro").error("failed", exc_info=(kind, value, traceback))
        previous(kind, value, traceback)

    sys.excepthook = log_then_raise
    return logging.getLogger("d2lrepro")


def progress(log: logging.Logger, done: str, since: float) -> float:
    """Log how long ``done`` took since ``since`` (a time.perf_counter()); now, for the next
    step."""
    now = time.perf_counter()
    log.info("%s in %.1f s", done, now - since)
    return now
