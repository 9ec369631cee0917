"""Config validation and preset resolution.

The top-level sections of config.yaml hold the book's own settings. A preset overlays its
block from ``presets`` on top of them, so every leaf a preset changes is a deviation from the
book, and the report can list them without anyone keeping that list by hand.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import runpy
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from d2lrepro.core import gpu_locks, paths, shortfall

SCHEMA = paths.CONFIG_SCHEMA


class ConfigError(ValueError):
    """A config that does not match the schema; the message names the offending key."""


# The value of a deviation that leaves an entry out: a preset maps it to null (see merge).
LEFT_OUT = "left out"
# The book's value of an entry the run adds (a run, a setting of a sweep).
NOT_IN_BOOK = "not in the book"
# The settings whose absence is null, all the data (a run's own subsets).
ALL_WHEN_UNSET = {"train_subset", "test_subset"}


@dataclass(frozen=True)
class Deviation:
    key: str
    book: object
    value: object


@dataclass(frozen=True)
class Settings:
    requested: str
    preset: str
    values: dict
    deviations: list[Deviation] = field(default_factory=list)
    # The keys of the deviations that --config or --configfile made, not the preset.
    overridden: frozenset[str] = frozenset()


def _with_defaults(validator_class):
    """Extend a validator so that validation also fills in the schema's defaults."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def read_yaml(path: Path):
    """The YAML file at ``path`` as ``yaml.safe_load`` reads it, with libyaml's parser where
    PyYAML has one: the ledger, read as the workflow is parsed, in a seventh of the time."""
    return yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_schema(path: Path = SCHEMA) -> dict:
    return read_yaml(path)


def validate(config: dict, schema: dict | None = None) -> dict:
    """Validate ``config`` in place (filling defaults); raise ConfigError naming the key."""
    schema = schema if schema is not None else load_schema()
    errors = sorted(_Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for error in errors:
            key = ".".join(str(p) for p in error.absolute_path) or "<top level>"
            lines.append(f"config key '{key}': {error.message}")
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    return config


def merge(base: dict, overlay: dict) -> dict:
    """Deep-merge ``overlay`` into a copy of ``base``; dicts merge, anything else replaces,
    except that null in place of a dict leaves that entry out (a run, a setting of a sweep;
    the schema's ``required`` keeps what the code always reads)."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if value is None and isinstance(merged.get(key), dict):
            del merged[key]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def deviations(book: dict, resolved: dict, prefix: str = "") -> list[Deviation]:
    """Every leaf where ``resolved`` differs from ``book``, every entry it adds (a run, a
    setting of a sweep: its book value :data:`NOT_IN_BOOK`) and every entry it leaves out
    (its value :data:`LEFT_OUT`), as dotted keys."""
    found = []
    for key, value in resolved.items():
        dotted = f"{prefix}{key}"
        # an entry the book lacks is added, but an unset subset is null: all the data
        original = book.get(key, None if key in ALL_WHEN_UNSET else NOT_IN_BOOK)
        if isinstance(value, dict) and isinstance(original, dict):
            found.extend(deviations(original, value, dotted + "."))
        elif value != original:
            found.append(Deviation(dotted, original, value))
    left_out = sorted(book.keys() - resolved.keys())
    found += [Deviation(f"{prefix}{key}", book[key], LEFT_OUT) for key in left_out]
    return found


def _cuda_available() -> bool:
    """Whether CUDA works here, for the preset ``auto``: torch is asked (cudaGetDeviceCount,
    which starts the driver: a stronger test than NVML's count) only where the machine has GPUs
    for it (local_gpus), since importing it slows a snakemake call by seconds."""
    if not local_gpus():
        return False
    import torch

    return torch.cuda.is_available()


def local_gpus() -> int:
    """GPUs of this machine, for jobs run on it, as torch counts them: 0 without an NVIDIA
    driver or with a torch built without CUDA. Found without importing torch, which takes
    seconds where torch has CUDA, in every snakemake call (gpu_locks.nvml_gpu_count); torch
    counts only what NVML cannot tell."""
    if not (Path("/proc/driver/nvidia").exists() or shutil.which("nvidia-smi")):
        return 0
    if not torch_has_cuda():
        return 0
    count = gpu_locks.nvml_gpu_count(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if count is None:
        import torch

        return torch.cuda.device_count()
    return count


def torch_has_cuda() -> bool:
    """Whether the torch installed here is built with CUDA (``torch.version.cuda``), read from
    its version file without importing it (imported only where that file is missing)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return False  # no torch installed
    version = Path(spec.origin).with_name("version.py")
    if not version.exists():  # a torch installed without its sources
        import torch

        return torch.version.cuda is not None
    return runpy.run_path(str(version)).get("cuda") is not None


def gpu_request(wanted: int, *, machine_gpus: int, book: bool, limit: int | None = None) -> int:
    """The GPUs a job asks its scheduler for, given the GPUs of the machine that plans the run
    and the run's ``limit`` (its `gpu` resource: ``--resources gpu=N``, else the machine's).
    A machine with GPUs runs its jobs itself: at most its own GPUs. One without, such as a
    cluster's login node, asks for the GPUs wanted under the book preset, the one made for
    GPUs. Never more than the limit (Snakemake 9.27 also caps a job's resources at the run's,
    but the rule states what its jobs get): a job locks the GPUs it asked for
    (gpu_locks.lock_gpus), so one given fewer than it wants finds its larger parts "not
    applicable here", with the reason."""
    request = min(wanted, machine_gpus) if machine_gpus else (wanted if book else 0)
    return request if limit is None else min(request, limit)


def planned_shortfall(
    workers: int,
    *,
    machine_gpus: int,
    limit: int | None,
    cores: int,
    here: bool,
    cuda: int = 0,
    share: bool = False,
) -> dict:
    """Why a job that runs ``workers`` devices, at least ``cuda`` of them GPUs, cannot run them
    on this machine, decided as the run is planned, so that such a job neither starts torch
    nor takes cores or a GPU to say so: ``{"reason": ..., "gpus": the GPUs it would have been
    given}``, else ``{}``. The job would lock ``workers`` of the machine's GPUs, at most the
    run's ``limit`` (its `gpu` resource), or, with none, run on its ``cores``, as
    :func:`d2lrepro.core.devices.unavailable` judges it in the job; a job whose workers may
    ``share`` GPUs lacks nothing where it would have one. A job planned for another machine
    (``here`` false: a cluster's node) decides there."""
    if not here:
        return {}
    wanted = max(workers, cuda)
    gpus = gpu_request(wanted, machine_gpus=machine_gpus, book=False, limit=limit)
    if share and gpus and not cuda:
        return {}
    reason = shortfall.reason(workers, cuda=cuda, have_cuda=gpus, cores=cores)
    return {"reason": reason, "gpus": gpus} if reason else {}


def shared_gpu_request(
    *, machine_gpus: int, book: bool, limit: int | None, share_limit: int | None, local: bool
) -> dict[str, int]:
    """The GPU resources of a job that trains on one GPU and times nothing a verdict depends
    on, so that it may share the GPU with other such jobs (gpu_locks.lock_shared_gpu). Run on
    this machine (``local``) and with GPUs: no `gpu`, which the jobs that time keep to
    themselves, but one `gpu_share` of the run's ``share_limit`` (N GPUs x jobs_per_gpu),
    none where the run may use no GPU. Submitted to a cluster, or planned on a host without
    GPUs: a `gpu` of its own, as :func:`gpu_request` asks it, since the scheduler allocates
    GPUs by `gpu`."""
    if machine_gpus and local:
        return {"gpu": 0, "gpu_share": min(1, limit, share_limit)}
    request = gpu_request(1, machine_gpus=machine_gpus, book=book, limit=limit)
    return {"gpu": request, "gpu_share": 0}


# Host memory of a job's process besides its data: Python, torch with its CUDA libraries, a CUDA
# context on each of two GPUs, pandas and matplotlib. 0.26 GB measured on a machine without
# CUDA; CUDA's share is not measured there: this leaves it 1.7 GB, and a cuda-marked test
# checks the sum against the peak of autopar's copy experiment at the book's size.
PROCESS_MB = 2000
FLOAT32 = 4


def pinned_block(nbytes: int) -> int:
    """The pinned memory torch's caching host allocator takes for ``nbytes``: the next power
    of two, kept cached for the rest of the process once freed."""
    return 1 << max(nbytes - 1, 0).bit_length()


def autopar_host_bytes(cfg: dict) -> int:
    """The most host memory the ``autopar`` job's data takes at once, from its config
    (autopar.measure). Computing while copying (autopar.copy_overlap): ``matmuls`` products
    of ``size`` x ``size`` copied to pageable memory, counted although freed after their part
    (the C heap may keep it), and as many pinned buffers, which torch's cache keeps and each
    part that copies into pinned memory takes again in turn. The CPU chains: both inputs and
    both chains' products, alive at once. The GPU parts keep nothing on the host. (Here, not
    in autopar, which imports torch: the Snakefile computes the request when it is parsed.)"""
    matrix = FLOAT32 * cfg["size"] ** 2
    cpu = cfg["cpu"]
    chains = 2 * (1 + cpu["matmuls"]) * FLOAT32 * cpu["size"] ** 2
    return cfg["matmuls"] * (matrix + pinned_block(matrix)) + chains


def autopar_mem_mb(cfg: dict) -> int:
    """The ``autopar`` job's memory request (MB, Snakemake's ``mem_mb``)."""
    return PROCESS_MB + math.ceil(autopar_host_bytes(cfg) / 1e6)


def run_options(schema: dict, prefix: str = "") -> set[str]:
    """The dotted keys that say how a run is carried out, not what it measures (the schema
    marks them ``x-run-option``): a change of them is no deviation from the book."""
    found = set()
    for key, spec in schema.get("properties", {}).items():
        if spec.get("x-run-option"):
            found.add(prefix + key)
        found |= run_options(spec, f"{prefix}{key}.")
    return found


def changed_by(preset: str, overridden, keys) -> str:
    """Who changed the settings ``keys``: the preset, or (where any is ``overridden``) the
    values given with --config or --configfile, or both."""
    given = "--config or --configfile"
    mine = sum(k in overridden for k in keys)
    return given if mine == len(keys) else f"preset {preset}" + f" and {given}" * bool(mine)


def resolve(
    config: dict,
    cuda_available: bool | None = None,
    schema: dict | None = None,
    record: Path | None = None,
    book: dict | None = None,
) -> Settings:
    """Validate ``config``, pick the preset (``auto``: book with CUDA, else cpu) and apply it.

    ``book`` is the config as the project's file holds it (None: ``config`` itself), whose
    top-level sections are the book's settings. ``config`` is what the run was given, with
    Snakemake's ``--configfile`` and ``--config`` merged in: a value they change counts as a
    deviation, as a preset's does.

    With ``record``, the preset a results tree was made with (:func:`record_preset`), the tree
    keeps it: ``auto`` takes the recorded preset, so a ``--report``, ``-n`` or ``-R`` from a
    host without the GPU the run used neither switches the preset nor reruns anything; an
    explicit other preset stops here, before any job runs, naming both.
    """
    schema = schema if schema is not None else load_schema()
    config = validate(copy.deepcopy(config), schema)
    requested = config["preset"]
    recorded = Path(record).read_text().strip() if record and Path(record).exists() else ""
    if recorded and recorded not in config["presets"]:
        raise ConfigError(f"{record} names no preset of the config: {recorded!r}")
    if recorded and requested not in ("auto", recorded):
        raise ConfigError(
            f"this results tree was made with preset {recorded} ({record}); --config"
            f" preset={requested} would mix two presets in it. Leave out --config preset= (or"
            f" give preset={recorded}) to go on with this tree, or start a new one: move"
            f" results/, logs/ and benchmarks/ aside (mv results results-{recorded}, and so on)"
        )
    if requested != "auto":
        preset = requested
    elif recorded:
        preset = recorded
    else:
        cuda = _cuda_available() if cuda_available is None else cuda_available
        preset = "book" if cuda else "cpu"
    values = merge(
        {k: v for k, v in config.items() if k != "presets"}, config["presets"].get(preset, {})
    )
    # A preset overlay may only change known keys to valid values: validate the result too.
    validate(values | {"presets": {}}, schema)
    book = config if book is None else validate(copy.deepcopy(book), schema)
    books = {k: v for k, v in book.items() if k != "presets"}
    options = tuple(f"{o}." for o in run_options(schema))  # each with what lies under it
    changed = [d for d in deviations(books, values) if not f"{d.key}.".startswith(options)]
    # What the values given beside the project's file changed of what its preset runs.
    given = deviations(merge(books, book["presets"].get(preset, {})), values)
    overridden = frozenset(d.key for d in given) & {d.key for d in changed}
    return Settings(requested, preset, values, changed, overridden)


def for_run(config: dict) -> Settings:
    """The settings of the workflow's run, given Snakemake's ``config`` (config.yaml with
    ``--configfile`` and ``--config`` merged in): the preset its results tree recorded kept,
    and every value that differs from the project's config.yaml a deviation."""
    return resolve(config, record=paths.PRESET, book=read_yaml(paths.CONFIG))


def record_preset(preset: str, record: Path) -> None:
    """Record ``preset`` as the one the results tree at ``record`` is made with, unless one
    is recorded already. The workflow calls this when its jobs start (``onstart``), so a dry
    run or a lint decides nothing for the tree."""
    record = Path(record)
    if not record.exists():
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(preset + "\n")
