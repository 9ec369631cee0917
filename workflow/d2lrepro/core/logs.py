"""Logging for workflow scripts: progress and tracebacks go to the rule's log file."""

from __future__ import annotations

import logging
import sys


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
