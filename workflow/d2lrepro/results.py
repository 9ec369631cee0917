"""Tidy result files: one row per measurement, long format."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd

METRIC_COLUMNS = ["metric", "value", "unit", "device", "note"]
log = logging.getLogger("d2lrepro")


def metric(name: str, value: float, unit: str = "", device: str = "cpu", note: str = "") -> dict:
    """One measured value; ``value`` NaN with a ``note`` says why it could not be measured."""
    return {"metric": name, "value": float(value), "unit": unit, "device": device, "note": note}


def not_applicable(name: str, reason: str, unit: str = "", device: str = "") -> dict:
    return metric(name, math.nan, unit, device, reason)


def write_csv(rows: list[dict] | pd.DataFrame, path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=columns)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return frame


def write_metrics(rows: list[dict], path: Path) -> pd.DataFrame:
    """Write the rows, and log each one: the job's log shows every number it measured."""
    for row in rows:
        log.info("%s = %.6g %s %s", row["metric"], row["value"], row["unit"], row["note"])
    return write_csv(rows, path, METRIC_COLUMNS)
