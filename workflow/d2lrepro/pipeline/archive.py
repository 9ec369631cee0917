"""A run you can carry: one zip of what a run measured, and a careful reader of such zips.

The archive holds the run's claims (``results/claims.csv``), its environment
(``results/environment.json``), the ledger it was judged by (``claims.yaml``), every evidence
file the ledger names with the records of the machines that measured it, and the tables its
figures draw, each under its path in the results tree, and a ``manifest.json``: format and
version, the run (host, date, preset, deviations, commit, torch) and every other member's size
and SHA-256. Plain CSV, JSON and YAML: readable with any zip tool, without this repository. No
checkpoints, data sets or images.

An archive comes from someone else's machine. :func:`read` executes nothing, writes nothing,
and refuses (with :class:`ArchiveError`, naming the file and what is wrong) anything but a zip
of regular files under relative names, within size bounds, each listed in the manifest with
its checksum.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import secrets
import socket
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

FORMAT = "d2lrepro-run"
VERSION = 1
MANIFEST = "manifest.json"
CLAIMS = "results/claims.csv"
ENVIRONMENT = "results/environment.json"
LEDGER = "claims.yaml"
# What every archive holds, and what each member is, for the messages.
REQUIRED = {
    CLAIMS: "the run's verdicts",
    ENVIRONMENT: "the run's machine",
    LEDGER: "the ledger the run was judged by",
}
CLAIM_COLUMNS = ("id", "section", "statement", "measured", "verdict")
# Bounds on what one archive may unpack to: a run of the book preset takes a few MB.
MAX_MEMBERS = 10_000
MAX_MEMBER_BYTES = 64 << 20
MAX_TOTAL_BYTES = 256 << 20
# A fixed timestamp and mode for every member: the same files make the same zip members.
MEMBER_TIME = (1980, 1, 1, 0, 0, 0)
MEMBER_MODE = (stat.S_IFREG | 0o644) << 16


class ArchiveError(ValueError):
    """An archive this reader refuses; the message names the file and what is wrong."""


def default_name(host: str, date: dt.date, run_id: str) -> str:
    """``run-<host>-<date>-<run_id>.zip``, the host's first label reduced to safe characters:
    two trees of one host and day (or of two hosts of one name) name their archives apart."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", host.split(".")[0]).strip("_") or "host"
    return f"run-{safe}-{date.isoformat()}-{run_id}.zip"


def name(given: str | None, record: Path) -> str:
    """The archive's file name: ``given`` (config ``archive_name``), else the name recorded
    for this results tree, else :func:`default_name` of this host, today (UTC) and a random
    short id of the tree, recorded at ``record`` so that the name, and the DAG, stay the same
    on later days (delete the record to name the next archive afresh)."""
    if given:
        return given
    record = Path(record)
    if record.exists():
        return record.read_text().strip()
    today = dt.datetime.now(dt.UTC).date()
    chosen = default_name(socket.gethostname(), today, secrets.token_hex(3))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(chosen + "\n")
    return chosen


def write(zip_path: Path, files: Mapping[str, Path], run: dict) -> dict:
    """Bundle ``files`` (name in the archive -> file on disk) with a manifest describing
    ``run`` (host, date, preset, ...) into ``zip_path``; returns the manifest."""
    missing = sorted(set(REQUIRED) - set(files))
    if missing:
        raise ValueError(f"an archive needs {missing}")
    contents = {n: Path(files[n]).read_bytes() for n in sorted(files)}
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "about": (
            "A run of the d2lrepro pipeline (Dive into Deep Learning, re-run): its verdicts "
            f"({CLAIMS}), its machine ({ENVIRONMENT}), the ledger it was judged by ({LEDGER}) "
            "and the measurements behind them, under their paths in the run's results tree."
        ),
        "run": run,
        "files": {
            n: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for n, data in contents.items()
        },
    }
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in [
            (MANIFEST, json.dumps(manifest, indent=2).encode()),
            *contents.items(),
        ]:
            info = zipfile.ZipInfo(member, MEMBER_TIME)
            info.external_attr = MEMBER_MODE
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return manifest


@dataclass(frozen=True)
class Run:
    """One archive, read and checked: its manifest and its members' contents."""

    path: Path
    manifest: dict
    files: dict[str, bytes]

    @property
    def info(self) -> dict:
        """The run: host, date, preset, deviations, commit, torch."""
        return self.manifest.get("run", {})

    @property
    def environment(self) -> dict:
        return json.loads(self.files[ENVIRONMENT])

    @property
    def claims(self) -> pd.DataFrame:
        return self.table(CLAIMS)

    @property
    def ledger(self) -> dict:
        return yaml.safe_load(self.files[LEDGER])

    def table(self, member: str) -> pd.DataFrame | None:
        """The CSV ``member`` (None if the archive lacks it), empty cells as ""."""
        if member not in self.files:
            return None
        return pd.read_csv(io.BytesIO(self.files[member]), keep_default_na=False)


def _refuse(path, what: str) -> ArchiveError:
    return ArchiveError(f"{path}: {what}")


def _check_member(path, info: zipfile.ZipInfo) -> None:
    """A regular file under a relative name that stays in its directory."""
    member = info.filename
    if any(ord(c) < 32 for c in member) or "\\" in member:
        raise _refuse(path, f"member {member!r} has control characters or backslashes in its name")
    if member.startswith("/") or re.match(r"[A-Za-z]:", member):
        raise _refuse(path, f"member {member!r} has an absolute name")
    if any(part in ("", ".", "..") for part in member.split("/")):
        raise _refuse(path, f"member {member!r} is not a plain relative file name (no '..')")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise _refuse(path, f"member {member!r} is a symbolic link")
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG) or info.external_attr & 0x10:
        raise _refuse(path, f"member {member!r} is not a regular file")
    if info.flag_bits & 0x1:
        raise _refuse(path, f"member {member!r} is encrypted")


def _member_bytes(path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """A member's contents, read no further than its declared size, itself within ``limit``."""
    if info.file_size > limit:
        raise _refuse(
            path, f"member {info.filename!r} unpacks to {info.file_size} bytes (at most {limit})"
        )
    try:
        with archive.open(info) as f:
            data = f.read(info.file_size + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as error:
        raise _refuse(path, f"member {info.filename!r} cannot be read: {error}") from error
    if len(data) != info.file_size:
        raise _refuse(path, f"member {info.filename!r} is not the size its header declares")
    return data


def _manifest(path, archive: zipfile.ZipFile, by_name: dict, max_member_bytes: int) -> dict:
    """The archive's manifest, once it is there, is JSON of this format and version and
    lists files with their checksums."""
    if MANIFEST not in by_name:
        raise _refuse(path, f"no {MANIFEST}: not an archive of a run of this pipeline")
    data = _member_bytes(path, archive, by_name[MANIFEST], max_member_bytes)
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise _refuse(path, f"{MANIFEST} is not JSON: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _refuse(path, f"{MANIFEST} does not describe a {FORMAT} archive")
    if manifest.get("version") != VERSION:
        raise _refuse(
            path,
            f"unknown archive version {manifest.get('version')!r} (this reader knows {VERSION})",
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values()
    ):
        raise _refuse(path, f"{MANIFEST} lists no files with their checksums")
    return manifest


def read(
    path: Path,
    max_member_bytes: int = MAX_MEMBER_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> Run:
    """Read and check the archive at ``path`` in memory: every bound, name, type, listing and
    checksum is checked from the zip's headers before any member is read, and again on the
    bytes read. Raises :class:`ArchiveError` naming the file and what is wrong."""
    path = Path(path)
    with _opened(path) as archive:
        by_name = _checked_headers(path, archive, max_member_bytes, max_total_bytes)
        manifest = _manifest(path, archive, by_name, max_member_bytes)
        _check_listing(path, manifest["files"], by_name)
        files = {
            member: _checked_bytes(path, archive, by_name[member], entry, max_member_bytes)
            for member, entry in sorted(manifest["files"].items())
        }
    return _parsed(Run(path, manifest, files))


def _opened(path: Path) -> zipfile.ZipFile:
    """The zip archive at ``path``, open for reading."""
    if not path.is_file():
        raise _refuse(path, "no such file")
    if not zipfile.is_zipfile(path):
        raise _refuse(path, "not a zip archive")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise _refuse(path, f"not a readable zip archive: {error}") from error


def _checked_headers(path, archive, max_member_bytes: int, max_total_bytes: int) -> dict:
    """The archive's members by name, once their count, names, types and sizes, read from
    the zip's headers alone, are within bounds."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _refuse(path, f"{len(infos)} members (at most {MAX_MEMBERS})")
    names = [i.filename for i in infos]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise _refuse(path, f"members named twice: {doubled}")
    for info in infos:
        _check_member(path, info)
        if info.file_size > max_member_bytes:
            raise _refuse(
                path,
                f"member {info.filename!r} unpacks to {info.file_size} bytes"
                f" (at most {max_member_bytes})",
            )
    total = sum(i.file_size for i in infos)
    if total > max_total_bytes:
        raise _refuse(path, f"unpacks to {total} bytes (at most {max_total_bytes})")
    return dict(zip(names, infos))


def _check_listing(path, listed: dict, by_name: dict) -> None:
    """The manifest lists every required member, and exactly the members the archive holds."""
    for member, what in REQUIRED.items():
        if member not in listed or member not in by_name:
            raise _refuse(path, f"no {member} ({what})")
    unlisted = sorted(set(by_name) - set(listed) - {MANIFEST})
    if unlisted:
        raise _refuse(path, f"member {unlisted[0]!r} is not listed in its {MANIFEST}")
    absent = sorted(set(listed) - set(by_name))
    if absent:
        raise _refuse(path, f"its {MANIFEST} lists {absent[0]!r}, which it does not hold")


def _checked_bytes(path, archive, info, entry: dict, max_member_bytes: int) -> bytes:
    """A member's bytes, once their length and checksum match its ``entry`` in the manifest."""
    data = _member_bytes(path, archive, info, max_member_bytes)
    if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise _refuse(path, f"member {info.filename!r} does not match its checksum")
    return data


def _parsed(run: Run) -> Run:
    """``run``, once its claims, environment and ledger parse, with the columns and types a
    comparison reads."""
    try:
        columns = set(run.claims.columns)
        parsed = {ENVIRONMENT: run.environment, LEDGER: run.ledger}
    except (ValueError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise _refuse(run.path, f"a member cannot be parsed: {error}") from error
    lacking = [c for c in CLAIM_COLUMNS if c not in columns]
    if lacking:
        raise _refuse(run.path, f"{CLAIMS} lacks the columns {lacking}")
    if not isinstance(parsed[ENVIRONMENT], dict) or not isinstance(parsed[LEDGER], dict):
        raise _refuse(run.path, f"{ENVIRONMENT} or {LEDGER} is not a mapping")
    return run
