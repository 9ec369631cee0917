"""Every example of the README and docs/ works as written: each YAML block is a config that
the schema accepts, and each Snakemake command is accepted by Snakemake's own command line,
its --config and --configfile validate, and, where this machine can plan it, a dry run
(-n) plans it."""

import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from snakemake.cli import get_argument_parser, parse_config

from conftest import REPO
from d2lrepro.pipeline import settings

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Commands a dry run here cannot plan, and why: they are checked by the parser and schema only.
NOT_PLANNED_HERE = {
    "--report": "a report needs a finished run",
    "--sdm": "needs conda",
    "--workflow-profile": "needs a SLURM cluster",
    "compare_with=": "needs the archives of earlier runs",
}
OUTPUTS = {".git", ".venv", ".snakemake", "results", "resources", "logs", "benchmarks"}


def blocks(language: str) -> list[tuple[str, str]]:
    """(page, text) of every fenced ``language`` block of the README and docs/."""
    fence = re.compile(rf"^```{language}\n(.*?)^```", re.M | re.S)
    return [(p.name, m.group(1)) for p in PAGES for m in fence.finditer(p.read_text())]


def inline_commands() -> list[tuple[str, str]]:
    """(page, text) of every Snakemake command quoted in a sentence (`snakemake ...`)."""
    span = re.compile(r"`((?:\.venv/bin/)?snakemake [^`]+)`")
    pages = [(p.name, m.group(1)) for p in PAGES for m in span.finditer(p.read_text())]
    return [(page, text.replace("\n", " ")) for page, text in pages]


def snakemake_commands() -> list[tuple[str, list[str]]]:
    """(page, arguments) of every Snakemake command in the bash blocks and the sentences,
    after the executable (a ``VAR=value`` before it, and ``&&``-joined set-up steps, left
    out)."""
    found = []
    for page, text in blocks("bash") + inline_commands():
        for line in text.replace("\\\n", " ").splitlines():
            for step in line.split("&&"):
                words = shlex.split(step, comments=True)
                at = [i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == "snakemake"]
                if at:
                    found.append((page, words[at[0] + 1 :]))
    return found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A copy of the repository without outputs, where the dry runs plan from scratch."""
    copy = tmp_path_factory.mktemp("docs") / "repo"
    shutil.copytree(REPO, copy, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    return copy


def test_the_pages_hold_examples():
    assert snakemake_commands() and blocks("bash")


def config_of(args) -> dict:
    """The config a command runs with: config.yaml, its --configfile files, its --config."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for path in args.configfile or []:
        config = settings.merge(config, yaml.safe_load((REPO / path).read_text()))
    return settings.merge(config, parse_config(args.config or []))


@pytest.mark.parametrize(
    "page, arguments", snakemake_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_snakemake_command_is_valid_as_written(page, arguments, workdir):
    args = get_argument_parser().parse_args(arguments)  # exits on an unknown option
    settings.resolve(config_of(args), cuda_available=False)
    why_not = [why for flag, why in NOT_PLANNED_HERE.items() if any(flag in a for a in arguments)]
    if why_not:
        pytest.skip(f"checked by the parser and the schema only: {why_not[0]}")
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", *arguments, "-n"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{page}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


@pytest.mark.parametrize("page, text", blocks("yaml"), ids=lambda v: v[:40])
def test_a_yaml_example_is_a_config_the_schema_accepts(page, text):
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    settings.resolve(settings.merge(config, yaml.safe_load(text)), cuda_available=False)


def test_the_readme_is_a_page_a_newcomer_finishes():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_and_image_of_a_page_is_there(page):
    """Relative links and images name files of the repository (anchors and URLs aside)."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    missing = [t for t in local if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to {missing}"


def test_the_table_of_claims_about_gpus_is_the_ledger_s():
    """docs/extend.md lists every claim whose premise is GPUs, as the ledger has it."""
    from d2lrepro.pipeline import claims

    page = (REPO / "docs" / "extend.md").read_text()
    table = page[page.index("## Which claims are about GPUs") :]
    listed = re.findall(r"^\| `([^`]+)` \| (\d+) \| (.+) \|$", table, re.M)
    ledger = claims.load()
    about_gpus = [
        (c["id"], str(c["requires"]["cuda_devices"]), c["premise_why"])
        for s in ledger["sections"]
        for c in s["claims"]
        if c["premise"] == "gpus"
    ]
    assert listed == about_gpus
