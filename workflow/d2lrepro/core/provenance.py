"""Which machine measured which number: every job that measures records the machine it ran
on (:func:`d2lrepro.core.environment.describe`, as the job saw it: its usable cores, its
threads, the GPUs its claim left it), and every row it writes names that record by its id in
a ``machine`` column. A data file's records sit beside it (``<name>.machines.json``, by id);
a summary's file holds those of the files it read, so that a claim's ``requires`` is judged
from the machines that measured its numbers, never from a job that saw another machine. A
row's ``device`` says what on that machine measured it, and a summary's rows and a figure's
footer name the devices and machines of the runs they are built from. Serves every section of
the ledger.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

COLUMN = "machine"
# The ids a job's rows are attributed to unless a row names its own: set by the job's opening
# (pipeline.job.start) and inherited by the worker processes it starts.
ATTRIBUTION = "D2LREPRO_MACHINES"


def sidecar(path) -> Path:
    """Where the records of the machines that measured ``path`` lie: ``x.csv`` beside it as
    ``x.machines.json``."""
    path = Path(path)
    return path.with_name(f"{path.name.rsplit('.', 1)[0]}.machines.json")


def record_id(record: dict) -> str:
    """A short name of ``record`` that changes with any of its facts."""
    text = json.dumps(record, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def ids_of(value) -> list[str]:
    """The ids one ``machine`` cell names (several, space-separated, for a number built from
    the rows of several jobs)."""
    return str(value).split() if isinstance(value, str) else []


def join(*cells) -> str:
    """One ``machine`` cell naming every id of ``cells``."""
    return " ".join(sorted({i for cell in cells for i in ids_of(cell)}))


def of_frame(frame) -> str:
    """The ``machine`` cell of numbers built from all of ``frame``'s rows ("" without one)."""
    return join(*frame[COLUMN]) if COLUMN in frame else ""


def attribution() -> str:
    """The ids this job's rows name when they name none ("" outside a job)."""
    return os.environ.get(ATTRIBUTION, "")


def attribute(frame):
    """``frame`` with its rows that name no machine attributed to this job's (a copy; the
    frame itself where there is nothing to add)."""
    default = attribution()
    if not default:
        return frame
    if COLUMN not in frame:
        return frame.assign(**{COLUMN: default})
    # A column read from a CSV with no machine at all is numbers (NaN): compared as text.
    machines = frame[COLUMN].astype("string").fillna("")
    return frame.assign(**{COLUMN: machines.where(machines.str.strip() != "", default)})


def read(paths) -> dict[str, dict]:
    """The records of the ``machines.json`` files ``paths``, by id."""
    records = {}
    for path in [paths] if isinstance(paths, str | Path) else paths:
        try:
            found = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: no readable machine records ({error})") from error
        if not isinstance(found, dict) or not all(isinstance(r, dict) for r in found.values()):
            raise ValueError(f"{path}: machine records must map ids to records")
        records |= found
    return records


def write(path, records: dict[str, dict]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(records, indent=2, sort_keys=True))


def record_job(
    output,
    inputs,
    measures: bool,
    threads: int | None = None,
    workers: bool = False,
    ran_alone: bool | None = None,
    described: dict | None = None,
) -> dict[str, dict]:
    """Record this job's machines in ``output`` (its ``machines`` output, or several, one
    beside each file of a job that writes one per setting; None: it has none):
    the records of the ``inputs`` it summarizes, and its own where it ``measures`` or reads
    none, with the ``threads`` it was given (a job whose ``workers`` use the GPUs describes
    them from a child process; one that starts no torch passes its record as ``described``)
    and, for a job that times, whether it ``ran_alone``. The job's rows (and its workers')
    are attributed to its own record, else to every record it read. Returns what it
    recorded."""
    if output is None:
        return {}
    from d2lrepro.core import environment  # describe imports torch: only in jobs that record

    summarized = read(inputs) if inputs else {}
    own = {}
    if measures or not summarized:
        record = described or environment.describe(threads, cuda_in_a_child=workers)
        if ran_alone is not None:
            record["ran_alone"] = ran_alone
        own = {record_id(record): record}
    os.environ[ATTRIBUTION] = " ".join(sorted(own or summarized))
    records = summarized | own
    for path in [output] if isinstance(output, str | Path) else output:
        write(path, records)
    return records


def records_of(frame, records: dict[str, dict], where: str) -> list[dict]:
    """The records of the machines ``frame``'s rows name, each once; ``where`` names the file
    in the error when a row names none, or one without a record."""
    cells = frame[COLUMN] if COLUMN in frame else [None] * len(frame)
    if any(not ids_of(cell) for cell in cells):
        raise ValueError(f"{where}: a row names no machine that measured it")
    ids = ids_of(join(*cells))
    unknown = sorted(set(ids) - set(records))
    if unknown:
        raise KeyError(f"{where}: rows name machines {unknown} with no record beside them")
    return [records[i] for i in ids]


def distinct(records) -> list[dict]:
    """The machines among ``records``, one per host and CPU model, with what their jobs could
    use: the cores, the CUDA devices (counts, and the GPUs by name) and the torch versions."""
    found: dict[tuple, dict] = {}
    for r in records:
        key = (r.get("host", ""), r["cpu_model"])
        m = found.setdefault(
            key,
            {"host": key[0], "cpu_model": key[1], "logical_cpus": r["logical_cpus"]}
            | {k: set() for k in ("cores", "cuda_devices", "gpus", "torch")},
        )
        m["cores"].add(r["usable_cores"])
        m["cuda_devices"].add(r["cuda_devices"])
        m["gpus"].update(r["gpus"])
        m["torch"].add(r["torch_version"])
    return [
        m | {k: sorted(m[k]) for k in ("cores", "cuda_devices", "gpus", "torch")}
        for m in found.values()
    ]


# The column that names what measured a row: a metric's or a run's ``device`` ("cpu",
# "cuda:0"), or the ``devices`` of a multi-device run ("2 x CPU core").
DEVICE_COLUMNS = ("device", "devices")


def _devices(cell) -> set[str]:
    """The devices one cell names (several, comma-separated, for a number built from rows
    measured on several)."""
    return {d.strip() for d in cell.split(",") if d.strip()} if isinstance(cell, str) else set()


def _device_cells(frame) -> list:
    column = next((c for c in DEVICE_COLUMNS if c in frame), None)
    return list(frame[column]) if column else [None] * len(frame)


def hosts_of(frame, records: dict[str, dict]) -> str:
    """The hosts of the machines that measured ``frame``'s rows (their ``machine`` cells,
    ``records`` by id), ", "-joined; "" where its rows name none with a host."""
    ids = ids_of(join(*frame[COLUMN])) if COLUMN in frame else []
    return ", ".join(sorted({records[i]["host"] for i in ids if records.get(i, {}).get("host")}))


def devices_of(*frames) -> str:
    """One ``device`` cell naming each device that measured the rows of ``frames`` ("cpu,
    cuda:0"): a summary's rows are measured on its runs' devices, never on its own job's."""
    found = {d for f in frames for cell in _device_cells(f) for d in _devices(cell)}
    return ", ".join(sorted(found))


def device_label(device: str, record: dict, threads: int | None = None) -> str:
    """``device`` of the machine of ``record`` in words: the CPU with its threads (``threads``,
    else those its job was given), a CUDA device with its GPU's name (a job's cuda:0, cuda:1,
    ... are the GPUs its record lists); a multi-device run's devices ("2 x CPU core") as named."""
    threads = threads or record.get("threads")
    if device == "cpu":
        return f"cpu ({threads} thread{'s' if threads != 1 else ''})" if threads else device
    gpus = record.get("gpus", [])
    names = [gpus[int(i)] for i in re.findall(r"cuda:(\d+)", device) if int(i) < len(gpus)]
    return f"{device} ({', '.join(dict.fromkeys(names))})" if names else device


def footer(records: dict[str, dict], *frames, where: str, threads: int | None = None) -> str:
    """A figure's footer: for each machine that measured the rows of ``frames`` (their
    ``machine`` cells, ``records`` by id), the devices they ran on (:func:`device_label`,
    ``threads``: those the CPU's numbers ran with, where fewer than its job's) and the machine,
    "measured on cpu (1 thread) of node1: <CPU model> (16 cores), torch <version>", with
    "beside other jobs" where a job that times did not run alone (its record's ``ran_alone``);
    a machine whose rows name no device (they measured nothing) as the machine alone. ``where``
    names the data in the error when a row names no machine, or one without a record."""
    devices: dict[str, set[str]] = {}
    for frame in frames:
        records_of(frame, records, where)
        for cell, device in zip(frame.get(COLUMN, []), _device_cells(frame)):
            for i in ids_of(cell):
                devices.setdefault(i, set()).update(_devices(device))
    lines = []
    for i, used in devices.items():
        r = records[i]
        host = f"{r['host']}: " if r.get("host") else ""
        machine = f"{host}{r['cpu_model']} ({r['usable_cores']} cores), torch {r['torch_version']}"
        machine += ", beside other jobs" if r.get("ran_alone") is False else ""
        labels = ", ".join(device_label(d, r, threads) for d in sorted(used))
        lines.append(f"measured on {labels} of {machine}" if labels else machine)
    return "; ".join(dict.fromkeys(lines))
