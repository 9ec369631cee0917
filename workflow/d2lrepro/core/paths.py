"""Where every file of the workflow lives: the one place that knows.

Files shipped with the repository are absolute (found from this module). Files a run writes
are relative to the working directory Snakemake runs in: each experiment writes under
``results/<chapter>/<experiment>/``, figures under ``results/figures/<section>/<name>.png``.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WORKFLOW = REPO / "workflow"
LEDGER = WORKFLOW / "claims.yaml"
CONFIG = REPO / "config.yaml"
CONFIG_SCHEMA = WORKFLOW / "schemas" / "config.schema.yaml"
CLAIMS_SCHEMA = WORKFLOW / "schemas" / "claims.schema.yaml"
BOOK_CURVES = WORKFLOW / "reference" / "book_curves.csv"
SCRIPTS = WORKFLOW / "scripts"
REPORT_TEMPLATE = REPO / "report" / "report.html.j2"
SECTION_TEMPLATE = REPO / "report" / "section.html.j2"
COMPARE_TEMPLATE = REPO / "report" / "compare.html.j2"
CAPTIONS = REPO / "report" / "captions"
# The caption of the figures of a section without a caption file of its own.
SECTION_CAPTION = CAPTIONS / "section.rst"

RESULTS = Path("results")
JOB_SERVER_LOG = Path("logs") / "job_server.log"
ENVIRONMENT = RESULTS / "environment.json"
CLAIMS = RESULTS / "claims.csv"
CLAIMS_MARKDOWN = RESULTS / "claims.md"
REPORT = RESULTS / "report.html"
# The preset a results tree was made with, written when its first jobs run: later runs keep it.
PRESET = RESULTS / "preset.txt"
# The name of the run's archive (run-<host>-<date>-<id>.zip), decided once per results tree.
ARCHIVE_NAME = RESULTS / "archive_name.txt"
# A comparison of the archives of several runs (rule compare).
COMPARE = RESULTS / "compare"
# Training checkpoints: outside every output, so that an interrupted job resumes from them.
CHECKPOINTS = RESULTS / "checkpoints"


def experiment(chapter: str, name: str) -> Path:
    """The directory of experiment ``name`` of ``chapter`` (optimization, performance,
    multidevice or data)."""
    return RESULTS / chapter / name


def figure(section: str, name: str) -> Path:
    """The figure ``name`` of ledger section ``section``."""
    return RESULTS / "figures" / section / f"{name}.png"


def run_file(run: str, seed: int | str, kind: str = "csv") -> str:
    """The name of a file of seed ``seed`` of run ``run`` of an experiment that runs each seed
    as a job of its own, ``<run>.seed<n>.<kind>`` (``kind``: csv, its history; topk.csv; log;
    tsv); with ``{run}`` and ``{seed}``, the rules' wildcard pattern."""
    return f"{run}.seed{seed}.{kind}"


def run_of(path, kind: str = "csv") -> tuple[str, int]:
    """The run and seed that ``path``, a :func:`run_file` of ``kind``, was named after; a
    ValueError where it is none."""
    name = Path(path).name
    # Greedy: a run's own name may hold dots (resnet18_b256.2), the seed is the last part.
    named = re.fullmatch(rf"(.+)\.seed(\d+)\.{re.escape(kind)}", name)
    if not named:
        raise ValueError(f"{path}: not a run's {kind} file, named <run>.seed<n>.{kind}")
    return named[1], int(named[2])


def claims_table(section: str) -> Path:
    """The claims of ledger section ``section`` as a page of their own, for the section's
    category of `snakemake --report` (which shows a section only through its files)."""
    return RESULTS / "claims" / f"{section}.html"


def caption(section: str) -> Path:
    """The caption of the figures of ledger section ``section`` in ``snakemake --report``:
    report/captions/<section>.rst where there is one, else the generic one."""
    own = CAPTIONS / f"{section}.rst"
    return own if own.exists() else SECTION_CAPTION
