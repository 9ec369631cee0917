"""The whole DAG on the smoke preset, in a temporary copy of the repository."""

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys

import markupsafe
import pandas as pd
import pytest
import yaml
from snakemake.cli import get_argument_parser
from snakemake.persistence.file import FilePersistence

from conftest import BROWSERS, OUTPUTS, TIMING_RULES, shipped_claims, snakemake
from d2lrepro.core import paths, results
from d2lrepro.pipeline import (
    archive,
    checks,
    claims,
    code_inputs,
    compare,
    explain,
    job_server,
    settings,
)

# Rules that run only when asked for, outside `all`.
ON_DEMAND = {"compare"}
# The performance chapter's timing rules: measured again on one core for a second run.
PERFORMANCE_RULES = ("hybridize", "asynchrony", "autopar", "hardware")


@pytest.mark.e2e
def test_smoke_run_writes_report_and_ledger(smoke_run):
    table = pd.read_csv(smoke_run / "results" / "claims.csv", keep_default_na=False)
    assert list(table.columns) == [*claims.COLUMNS, "explanation", "plain"]
    ledger = claims.load(smoke_run / "workflow" / "claims.yaml")
    assert set(table["id"]) == {c["id"] for s in ledger["sections"] for c in s["claims"]}
    assert set(table["verdict"]) <= set(claims.VERDICTS)
    assert (table.loc[table["verdict"] == claims.NOT_APPLICABLE, "reason"] != "").all()
    html = (smoke_run / "results" / "report.html").read_text()
    assert "<b>smoke</b>" in html
    for section in ledger["sections"]:
        assert section["title"] in html
        assert (smoke_run / paths.claims_table(section["id"])).exists()
    assert html.count("data:image/png;base64,") == len(claims.figure_files(ledger))
    assert not re.search(r"\bseeds? 0\d\d", html, re.I)  # sources by title, not file number
    assert not re.search(r"<td>\{'", html)  # a left-out run's book settings, not a dict


# The most a report may weigh (bytes), every figure embedded in it.
REPORT_BUDGET = 1_500_000


@pytest.mark.e2e
def test_the_report_stays_light_with_every_figure_in_it(smoke_run):
    """The smoke preset draws every figure a run draws, as the cpu preset does."""
    assert (smoke_run / paths.REPORT).stat().st_size < REPORT_BUDGET


@pytest.mark.e2e
def test_no_figure_of_the_run_leaves_a_reader_to_guess(smoke_run):
    """Saving a figure logs what it lacks (an axis label, a legend entry; plotting.problems)."""
    said = [
        line
        for log in (smoke_run / "logs").rglob("*.log")
        for line in log.read_text().splitlines()
        if "WARNING d2lrepro.core.plotting" in line
    ]
    assert said == []


@pytest.mark.e2e
def test_the_claims_to_paste_are_a_row_each_beside_claims_csv(smoke_run):
    table = pd.read_csv(smoke_run / paths.CLAIMS, keep_default_na=False)
    lines = (smoke_run / paths.CLAIMS_MARKDOWN).read_text().splitlines()
    assert [line.split(" | ")[0].removeprefix("| ") for line in lines[2:]] == list(table["id"])


# Metric names that say they hold a time, a size, a rate or a speed-up.
POSITIVE_BY_NAME = re.compile(
    r"(_s|_us|_ns|seconds|sec_per_epoch|bytes|speedup|gbps|samples_per_s|over_sync)(_iqr)?$"
)


@pytest.mark.e2e
def test_every_time_size_rate_or_speedup_is_written_with_a_unit_whose_domain_is_positive(
    smoke_run,
):
    """A time written without its unit would escape the evaluator's domain: a 0 s would pass."""
    written = [
        (path.relative_to(smoke_run), row.metric, row.unit)
        for path in (smoke_run / "results").rglob("*.csv")
        if {"metric", "unit"} <= set((frame := pd.read_csv(path, keep_default_na=False)).columns)
        for row in frame.itertuples()
    ]
    assert written
    wrong = [
        (path, metric, unit)
        for path, metric, unit in written
        if POSITIVE_BY_NAME.search(metric) and results.UNITS.get(unit) not in results.POSITIVE
    ]
    assert not wrong


# The kinds of unit a timing is written in, and the claims on a statistic of timings that has
# no unit (a sign test over timed pairs).
# The metrics the smoke preset does not measure because it leaves out what measures them (the
# lr schedules as intended, ResNet-18 at batch 256 on 2 devices). Their claims read "not
# applicable here" naming them; any other metric a claim names and the run lacks is a typo in
# the ledger or a summary that lost it, which a claim depending on a left-out setting would
# otherwise excuse.
SMOKE_LEAVES_OUT = {
    "multistep.intended.test_acc",
    "multistep.intended.test_acc_spread",
    "cosine.intended.early_test_acc",
    "cosine.intended.early_test_acc_spread",
    "warmup.intended.early_test_acc",
    "warmup.intended.early_test_acc_spread",
    "resnet18_b256.2.test_acc",
    "resnet18_b256.2.test_acc_spread",
}
NOT_MEASURED = "; this run measures no "


@pytest.mark.e2e
def test_the_smoke_run_lacks_only_the_metrics_of_what_it_leaves_out(smoke_run):
    table = pd.read_csv(smoke_run / "results" / "claims.csv", keep_default_na=False)
    lacking = {
        metric
        for reason in table["reason"]
        if NOT_MEASURED in reason
        for metric in reason.split(NOT_MEASURED)[1].split(", ")
    }
    assert lacking == SMOKE_LEAVES_OUT


@pytest.mark.e2e
def test_every_number_a_plain_sentence_names_is_a_metric_of_its_evidence(smoke_run):
    """A claim's plain sentence reads "" where a number it names is missing, as where a run
    measured nothing: a misspelled name would leave it empty in every run, unnoticed. The
    smoke run writes every metric a plain sentence names, measured or not applicable."""
    misnamed = []
    for section in claims.load(smoke_run / "workflow" / "claims.yaml")["sections"]:
        for claim in [c for c in section["claims"] if "plain" in c]:
            metrics = set(pd.read_csv(smoke_run / claim["evidence"])["metric"])
            # "{a / b}" names two metrics (explain.ratio); "{a/b}", one that no summary writes
            names = {
                n.strip() for p in explain.placeholders(claim["plain"]) for n in p.split(" / ")
            }
            misnamed += [f"{claim['id']}: {name}" for name in sorted(names - metrics)]
    assert not misnamed


TIMING_KINDS = {"time", "bandwidth", "throughput", "speed-up"}
TIMED_WITHOUT_A_UNIT = {"hyb.bench.naive"}


@pytest.mark.e2e
def test_every_claim_on_a_timing_is_timed_and_the_smoke_preset_judges_none(smoke_run):
    """A claim that reads a time, a rate or a speed-up says timed: true, so that it is not
    judged where its jobs shared the machine; the smoke preset lets them (timings_alone:
    false), and judges no timed claim."""
    table = pd.read_csv(smoke_run / "results" / "claims.csv", keep_default_na=False)
    verdicts = dict(zip(table["id"], table["verdict"]))
    untimed = []
    for section in claims.load(smoke_run / "workflow" / "claims.yaml")["sections"]:
        for claim in section["claims"]:
            frame = pd.read_csv(smoke_run / claim["evidence"], keep_default_na=False)
            units = dict(zip(frame["metric"], frame["unit"]))
            read = [n for check in claim["checks"] for n in checks.metrics_of(check)]
            timing = any(results.UNITS.get(units.get(n)) in TIMING_KINDS for n in read)
            if timing or claim["id"] in TIMED_WITHOUT_A_UNIT:
                if not claim.get("timed"):
                    untimed.append(claim["id"])
            if claim.get("timed"):
                assert verdicts[claim["id"]] == claims.NOT_APPLICABLE, claim["id"]
    assert not untimed


@pytest.fixture(scope="module")
def comparison(smoke_run, mirror, tmp_path_factory):
    """Two real runs compared: the smoke run, and a copy of it whose performance chapter was
    measured again on one core instead of two (the rest of its tree is the first run's), each
    bundled by rule archive; then rule compare on both archives. Returns the two archives and
    results/compare/ of the second tree."""
    first = smoke_run / "results" / (smoke_run / paths.ARCHIVE_NAME).read_text().strip()
    workdir = tmp_path_factory.mktemp("one_core") / "repo"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    config = ["--config", "preset=smoke", f"data_mirror={mirror}"]
    snakemake(workdir, "--cores", "1", "-R", *PERFORMANCE_RULES, *config, "archive_name=one.zip")
    second = workdir / "results" / "one.zip"
    snakemake(workdir, "--cores", "1", "compare", *config, f"compare_with=[{first}, {second}]")
    return first, second, workdir / paths.COMPARE


@pytest.mark.e2e
def test_two_real_runs_are_bundled_and_compared(comparison):
    first, second, out = comparison
    runs = [archive.read(first), archive.read(second)]
    hybridize = "results/performance/hybridize/metrics.csv"
    assert runs[0].files[hybridize] != runs[1].files[hybridize]  # measured again, not copied
    assert runs[0].info["preset"] == "smoke" and runs[0].info["date"] != runs[1].info["date"]
    names = set(runs[0].files)
    assert set(claims.evidence_files(runs[0].ledger)) <= names
    assert not any(n.endswith((".pt", ".png")) or "checkpoints" in n for n in names)
    assert first.stat().st_size < 1_000_000
    table = pd.read_csv(out / "compare.csv", keep_default_na=False)
    verdicts = [r.claims.set_index("id")["verdict"] for r in runs]
    assert set(table["id"]) == set(verdicts[0].index) == set(verdicts[1].index)
    flipped = {i for i in verdicts[0].index if verdicts[0][i] != verdicts[1][i]}
    assert set(table.loc[table["group"] == compare.DIFFERS, "id"]) == flipped
    assert table["group"].map(compare.GROUPS.index).is_monotonic_increasing  # flips first
    html = (out / "compare.html").read_text()
    assert all(name in html for name in compare.labels(runs))
    assert html.count("data:image/png;base64,") >= 3  # curves beside the book's, and ratios


@pytest.mark.e2e
def test_the_report_opens_with_what_the_run_found(smoke_run, tmp_path):
    """What a reader sees, in a headless browser where one is installed: the machine that
    measured on the first line, the findings of each chapter first, every claim under its
    headline, the claims this machine cannot judge folded away by reason, and the count of
    each reason at the top; the first screen is drawn."""
    report = smoke_run / "results" / "report.html"
    table = pd.read_csv(smoke_run / "results" / "claims.csv", keep_default_na=False)
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        html = report.read_text()
    else:
        headless = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        html = subprocess.run(
            [*headless, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120
        ).stdout
        shot = tmp_path / "first-screen.png"
        subprocess.run(
            [*headless, "--window-size=1280,900", f"--screenshot={shot}", report.as_uri()],
            capture_output=True,
            timeout=120,
        )
        assert shot.stat().st_size > 50_000  # a screen drawn, not a blank one
    found = html.index('<section id="found">')
    assert html.index('class="machine">Measured on ') < found  # what measured, first
    # the contents first, kept in view beside the page; then the findings
    assert html.index('id="contents"') < found < html.index('id="judge"') < html.index('id="setup"')
    for title in claims.load(smoke_run / "workflow" / "claims.yaml")["chapters"].values():
        assert html.index(title["title"], found) < html.index('id="judge"')
    assert "This run judged" in html
    unjudged = table[table["verdict"] == claims.NOT_APPLICABLE]
    assert html.count('<details class="folded">') >= 1 and len(unjudged)
    assert f"{len(unjudged)} not applicable here: " in html
    raw = report.read_text()
    for row in table.itertuples():
        assert f"<summary>{markupsafe.escape(row.headline)}</summary>" in raw, row.id
    for row in table[table["verdict"] == claims.NOT_REPRODUCED].itertuples():
        assert row.explanation and "Why it differs" in html


@pytest.mark.e2e
def test_the_comparison_opens_in_a_headless_browser(comparison, tmp_path):
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        pytest.skip(f"no headless browser installed (looked for {', '.join(BROWSERS)})")
    page = (comparison[2] / "compare.html").as_uri()
    headless = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*headless, "--dump-dom", page], capture_output=True, text=True, timeout=120
    )
    assert "2 runs compared" in dom.stdout and "one.zip" in dom.stdout
    shot = tmp_path / "compare.png"
    subprocess.run(
        [*headless, "--window-size=1400,2000", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 50_000  # a page drawn, not a blank one


def test_a_bad_archive_stops_compare_before_any_job(repo, tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_text("not a zip")
    config = ["--config", "preset=smoke"]
    result = snakemake(repo, "-n", "compare", *config, f"compare_with=[{bad}]", check=False)
    assert result.returncode != 0
    assert f"{bad}: not a zip archive" in result.stdout + result.stderr
    result = snakemake(repo, "-n", "compare", *config, check=False)
    assert result.returncode != 0
    assert "compare_with='[a.zip, b.zip]'" in result.stdout + result.stderr


@pytest.mark.e2e
def test_every_rule_logged_and_computing_rules_benchmarked(smoke_run):
    logs = list((smoke_run / "logs").rglob("*.log"))
    assert logs and all(p.stat().st_size > 0 for p in logs)
    assert (smoke_run / "benchmarks" / "intro.tsv").exists()


@pytest.mark.e2e
def test_jobs_ran_forked_from_the_job_server_once_it_listened_and_it_stopped_with_the_run(
    smoke_run,
):
    """The run does not wait for the server's imports: a job that started before it listened
    ran in its own Python, and says so."""
    assert "listening" in (smoke_run / paths.JOB_SERVER_LOG).read_text()
    logs = set((smoke_run / "logs").rglob("*.log")) - {smoke_run / paths.JOB_SERVER_LOG}
    forked = [p for p in logs if "forked from the job server" in p.read_text()]
    own = "a Python of its own: the job server was still importing"
    assert forked and all(own in p.read_text() for p in logs - set(forked))
    assert not list((smoke_run / job_server.SOCKETS).iterdir())


@pytest.mark.e2e
def test_dry_run_after_full_run_plans_nothing(smoke_run, mirror):
    result = snakemake(
        smoke_run, "-n", "--cores", "2", "--config", "preset=smoke", f"data_mirror={mirror}"
    )
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.e2e
def test_rerunning_one_rule_touches_only_its_dependants(smoke_run, mirror):
    result = snakemake(
        smoke_run,
        "-n",
        "-R",
        "intro",
        "--cores",
        "2",
        "--config",
        "preset=smoke",
        f"data_mirror={mirror}",
    )
    planned = result.stdout + result.stderr
    assert "rule intro:" in planned and "rule report:" in planned
    assert "rule fetch_data:" not in planned and "prepare_fashion_mnist" not in planned


@pytest.mark.e2e
def test_a_rerun_keeps_the_preset_of_its_results_tree(smoke_run, mirror):
    """Without --config preset=, `auto` takes the tree's smoke preset (as cpu or book it would
    replan the whole DAG); another explicit preset stops before any job, naming both."""
    assert (smoke_run / paths.PRESET).read_text() == "smoke\n"
    rerun = ["-n", "-R", "intro", "--cores", "2", "--config", f"data_mirror={mirror}"]
    planned = snakemake(smoke_run, *rerun).stdout
    assert "rule intro:" in planned and "rule airfoil_run:" not in planned
    mixed = snakemake(smoke_run, *rerun, "preset=cpu", check=False)
    said = mixed.stdout + mixed.stderr
    assert mixed.returncode and "made with preset smoke" in said and "preset=cpu" in said


@pytest.mark.e2e
def test_snakemake_report(smoke_run, mirror, tmp_path):
    snakemake(
        smoke_run,
        "--report",
        str(tmp_path / "report.html"),
        "--config",
        "preset=smoke",
        f"data_mirror={mirror}",
    )
    html = (tmp_path / "report.html").read_text()
    assert len(html) > 100_000
    for category in claims.section_categories(claims.load()).values():
        assert json.dumps(category) in html  # every section, those without a figure too


def test_one_job_trains_every_airfoil_setting_and_each_lr_run_is_its_own(repo):
    config = yaml.safe_load((repo / "config.yaml").read_text())
    smoke = settings.resolve({**config, "preset": "smoke"}).values
    result = snakemake(repo, "-n", "--forceall", "--quiet", "rules", "--config", "preset=smoke")
    counts = dict(
        line.split()[:2]
        for line in result.stdout.splitlines()
        if line.strip() and line.split()[-1].isdigit()
    )
    assert int(counts["airfoil_run"]) == 1 < len(smoke["airfoil"]["settings"])
    # the constant run once (as written), four schedules under each semantics the preset runs
    semantics = smoke["lr_schedules"]["semantics"]
    assert int(counts["lr_schedules_run"]) == 1 + 4 * len(semantics)


@pytest.mark.parametrize("preset, threads", [("cpu", 3), ("smoke", 1)])
def test_timing_rules_run_alone_unless_the_preset_lets_them_share(repo, preset, threads):
    """They take every core, so the scheduler runs nothing beside them; under the smoke preset
    (timings_alone: false) one core, beside other jobs (a dry run shows threads above 1). A
    job that the plan found short of devices, or whose time no claim can judge here, times
    nothing: one core (tested above)."""
    result = snakemake(repo, "-n", "--forceall", "--cores", "3", "--config", f"preset={preset}")
    jobs = (result.stdout + result.stderr).split("\n[")
    for rule in TIMING_RULES:
        blocks = [j for j in jobs if f"rule {rule}:" in j]
        timing = [j for j in blocks if not re.search(r"\b(shortfall|unjudged)=[^,\s]", j)]
        shown = [re.search(r"\n    threads: (\d+)", j) for j in timing]
        assert blocks and all((int(m[1]) if m else 1) == threads for m in shown), rule


def test_on_slurm_the_timing_rules_ask_for_a_whole_node(repo):
    profile = yaml.safe_load((repo / "profiles" / "slurm" / "config.yaml").read_text())
    exclusive = {
        rule
        for rule, res in profile["set-resources"].items()
        if "--exclusive" in res["slurm_extra"]
    }
    assert exclusive == set(TIMING_RULES) == set(profile["set-threads"])


@pytest.mark.parametrize("profile", ["default", "slurm"])
def test_both_workflow_profiles_rerun_what_a_stopped_run_left_incomplete(repo, profile):
    """profiles/default is read without a flag; profiles/slurm replaces it where it is named,
    so each carries rerun-incomplete."""
    parser = get_argument_parser(profiles=[repo / "profiles" / profile])
    assert parser.parse_args([]).rerun_incomplete


def test_a_stopped_run_resumes_with_the_same_command(repo, mirror, tmp_path):
    """A job stopped part way leaves its output marked incomplete (.snakemake/incomplete/, as
    Snakemake marks a job that starts): Snakemake alone then refuses to go on without
    --rerun-incomplete; with the workflow's default profile the same command makes it again."""
    workdir = tmp_path / "repo"
    shutil.copytree(repo, workdir, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    target = "resources/airfoil/airfoil_self_noise.dat"
    command = ["--cores", "1", "--config", f"data_mirror={mirror}", "--", target]
    snakemake(workdir, *command)
    marks = FilePersistence(path=workdir / ".snakemake")
    marks._mark_incomplete(target, None)  # as Persistence.started does for a job's outputs
    bare = snakemake(workdir, "--workflow-profile", "none", "-n", *command, check=False)
    assert bare.returncode and "IncompleteFilesException" in bare.stdout + bare.stderr
    snakemake(workdir, *command)
    assert not os.listdir(workdir / ".snakemake" / "incomplete")
    assert (workdir / target).stat().st_size


def test_a_run_across_nodes_asks_slurm_for_them(repo, tmp_path):
    """One task (a torchrun agent) per node, started by the job itself: the executor's `mpi`
    resource, which a one-node run does not carry."""
    extra = tmp_path / "nodes.yaml"
    extra.write_text(
        "data_parallel:\n  runs:\n    lenet.4: {model: lenet, devices: 4, nodes: 2, epochs: 1,"
        " batch_size: 256, lr: 0.2}\n"
    )
    targets = [
        "results/multidevice/data_parallel/lenet.4.seed0.csv",
        "results/multidevice/data_parallel/lenet.2.seed0.csv",
    ]
    result = snakemake(repo, "-n", "--forceall", "--configfile", extra, "--", *targets)
    lines = result.stdout.splitlines()
    asked = {  # run -> the resources line of its job
        line.split("run=")[1].split(",")[0]: next(r for r in lines[i:] if "resources:" in r)
        for i, line in enumerate(lines)
        if "wildcards: run=" in line
    }
    assert all(r in asked["lenet.4"] for r in ("nodes=2", "tasks=2", "mpi=srun"))
    assert "mpi=" not in asked["lenet.2"] and "nodes=" not in asked["lenet.2"]


@pytest.mark.skipif(not shutil.which("taskset"), reason="needs taskset")
def test_on_one_core_the_1_device_runs_train_as_jobs_that_time_nothing(repo, tmp_path):
    """Without 2 GPUs no claim judges a run's time: the 1-device run says so in its
    `unjudged` resource, and the 2-device run, which cannot run on one core, is light too. A
    run across nodes decides what it lacks in its job."""
    extra = tmp_path / "nodes.yaml"
    extra.write_text(
        "data_parallel:\n  runs:\n    lenet.4: {model: lenet, devices: 4, nodes: 2, epochs: 1,"
        " batch_size: 256, lr: 0.2}\n"
    )
    targets = [f"results/multidevice/data_parallel/lenet.{d}.seed0.csv" for d in (1, 2, 4)]
    plan = ["-m", "snakemake", "-n", "--forceall", "--cores", "1", "--configfile", str(extra)]
    result = subprocess.run(
        ["taskset", "-c", "0", sys.executable, *plan, "--", *targets],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    asked = {  # run -> the resources line of its job
        line.split("run=")[1].split(",")[0]: next(r for r in lines[i:] if "resources:" in r)
        for i, line in enumerate(lines)
        if "wildcards: run=" in line
    }
    why, short = "needs 2 GPUs, the job that measured it could use none", "needs 2 devices"
    assert f"unjudged={why}" in asked["lenet.1"]
    said = re.compile(r"\b(shortfall|unjudged)=[^,]")  # a reason: not empty
    # The 2-device run cannot run here at all: a light job, whose time nothing judges either.
    assert f"shortfall={short}" in asked["lenet.2"] and f"unjudged={why}" in asked["lenet.2"]
    assert not said.search(asked["lenet.4"])


def test_bad_config_stops_before_any_job(repo):
    result = snakemake(repo, "-n", "--config", "intro={grid_step: fine}", check=False)
    assert result.returncode != 0
    assert "config key 'intro.grid_step'" in result.stdout + result.stderr


def test_lint(repo):
    result = snakemake(repo, "--lint", check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakefmt(repo):
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "."], cwd=repo, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def planned_jobs(output):
    """{rule: [its jobs' inputs]} of a dry run's output."""
    jobs = {}
    for block in re.split(r"\n(?=\[|rule |localrule )", output):
        match = re.search(r"^(?:local)?rule (\w+):\n(?:    input: (.*)\n)?", block, re.M)
        if match:
            jobs.setdefault(match[1], []).append((match[2] or "").split(", "))
    return jobs


def rule_scripts(repo):
    """{rule: its script's path} from the rule files."""
    text = "".join(p.read_text() for p in (repo / "workflow" / "rules").glob("*.smk"))
    blocks = re.split(r"^(?=rule )", text, flags=re.M)
    found = {}
    for block in blocks:
        name = re.match(r"rule (\w+):", block)
        script = re.search(r'script:\n\s+"\.\./scripts/(\w+\.py)"', block)
        if name and script:
            found[name[1]] = repo / "workflow" / "scripts" / script[1]
    return found


def test_code_inputs_are_the_import_closure_of_each_script(repo):
    result = snakemake(repo, "-n", "--forceall", "--cores", "2", "--config", "preset=smoke")
    jobs = planned_jobs(result.stdout + result.stderr)
    scripts = rule_scripts(repo)
    assert set(scripts) - ON_DEMAND == set(jobs) - {"all"}
    for rule, inputs in jobs.items():
        for job_inputs in inputs:
            declared = sorted(f for f in job_inputs if f.startswith("workflow/d2lrepro/"))
            expected = code_inputs.closure(scripts[rule], repo) if rule in scripts else []
            assert declared == expected, rule


@pytest.mark.e2e
def test_editing_a_module_reruns_exactly_the_rules_that_import_it(smoke_run, mirror):
    config = ["--cores", "2", "--config", "preset=smoke", f"data_mirror={mirror}"]
    module = smoke_run / "workflow" / "d2lrepro" / "optimization" / "schedulers.py"
    users = [
        rule
        for rule, script in rule_scripts(smoke_run).items()
        if "workflow/d2lrepro/optimization/schedulers.py" in code_inputs.closure(script, smoke_run)
        and rule != "compare"  # on demand only: no run of the DAG plans it
    ]
    assert {"lr_schedules_plot", "lr_schedules_run", "lr_schedules_summary"} <= set(users)
    forced = planned_jobs(snakemake(smoke_run, "-n", "-R", *users, *config).stdout)
    source, stat = module.read_text(), module.stat()
    try:
        # Snakemake compares contents, not only times: a touch is not an edit.
        module.write_text(source + "# an edit\n")
        edited = planned_jobs(snakemake(smoke_run, "-n", *config).stdout)
    finally:
        module.write_text(source)
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert {r: len(j) for r, j in edited.items()} == {r: len(j) for r, j in forced.items()}
    assert "hybridize" not in edited and "data_parallel_run" not in edited


def test_python_style(repo):
    for check in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *check, "workflow", "tests"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr


EXPERIMENT_PACKAGES = ("optimization", "performance", "multidevice")


def test_module_style_no_module_over_350_lines(repo):
    for path in sorted((repo / "workflow" / "d2lrepro").glob("*/*.py")):
        assert len(path.read_text().splitlines()) <= 350, path


def test_module_style_each_experiment_module_names_the_ledger_ids_it_serves(repo):
    """In its docstring: ``section.*``, claim ids or globs of them; or that it serves none."""
    ids = list(shipped_claims())
    for package in EXPERIMENT_PACKAGES:
        for path in sorted((repo / "workflow" / "d2lrepro" / package).glob("*.py")):
            if path.name == "__init__.py":
                continue
            doc = ast.get_docstring(ast.parse(path.read_text()))
            named = [n for n in re.findall(r"``([\w.*]+)``", doc) if fnmatch.filter(ids, n)]
            assert named or "serves no ledger id" in doc, path


def test_each_experiment_has_its_test_file_and_results_directory(repo):
    """An experiment is a module of a chapter package that a workflow script runs: its tests
    are tests/<chapter>/test_<module>.py, and its rules write under results/<chapter>/<module>/
    (a part of an experiment in a module of its own, <experiment>_<part>, such as its summary,
    under the experiment's)."""
    written = [path for path, _, _ in rule_outputs(repo)]
    chapters = {f"d2lrepro.{package}" for package in EXPERIMENT_PACKAGES}
    run = {
        (node.module.split(".")[1], alias.name): script.name
        for script in (repo / "workflow" / "scripts").glob("*.py")
        for node in ast.walk(ast.parse(script.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module in chapters
        for alias in node.names
    }
    assert len(run) > 10
    for (chapter, module), script in sorted(run.items()):
        assert (repo / "tests" / chapter / f"test_{module}.py").is_file(), (script, module)
        words = module.removesuffix("_summary").split("_")
        # a part of an experiment: the longest of its leading words that names a module
        leading = ["_".join(words[:n]) for n in range(len(words) - 1, 0, -1)]
        package = repo / "workflow" / "d2lrepro" / chapter
        experiment = next((w for w in leading if (package / f"{w}.py").is_file()), "_".join(words))
        directory = f"{paths.experiment(chapter, experiment)}/"
        assert any(path.startswith(directory) for path in written), (script, module)


def test_every_module_has_its_test_file(repo):
    """tests/ mirrors the package: the tests of workflow/d2lrepro/<package>/<module>.py, an
    experiment's or not, are tests/<package>/test_<module>.py."""
    modules = sorted((repo / "workflow" / "d2lrepro").glob("*/*.py"))
    assert len(modules) > 50
    missing = [
        f"{path.parent.name}/{path.stem}"
        for path in modules
        if path.stem != "__init__"
        and not (repo / "tests" / path.parent.name / f"test_{path.stem}.py").is_file()
    ]
    assert missing == [], "modules without tests/<package>/test_<module>.py"


def test_script_style_every_script_opens_with_the_shared_preamble(repo):
    """Scripts hand themselves over to the job server first, before their other imports, then
    open with job.start(snakemake, ...) right after them, and leave the log, the GPU lock and
    the threads to it."""
    for path in sorted((repo / "workflow" / "scripts").glob("*.py")):
        source = path.read_text()
        nodes = ast.parse(source).body
        assert [ast.unparse(n) for n in nodes[:2]] == [
            "from d2lrepro.pipeline import job_server",
            "job_server.hand_over(snakemake)",
        ], path
        body = [n for n in nodes[2:] if not isinstance(n, ast.Import | ast.ImportFrom)]
        opening = body[0].value if isinstance(body[0], ast.Assign | ast.Expr) else None
        assert isinstance(opening, ast.Call), path
        assert ast.unparse(opening.func) == "job.start", path
        assert ast.unparse(opening.args[0]) == "snakemake", path
        for preamble in ("logs.setup", "lock_gpus", "set_num_threads"):
            assert preamble not in source, (path, preamble)


PLAN_ON_GPUS = """
import json
import sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.scheduling.job_scheduler import JobScheduler
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings
from snakemake.workflow import Workflow
from d2lrepro.core import shortfall
from d2lrepro.pipeline import settings

settings.local_gpus = lambda: int(sys.argv[1])  # this machine, as the Snakefile sees it
shortfall.usable_cores = lambda: 2  # and its cores, those of the run
if sys.argv[3] == "remote":  # jobs submitted to a cluster, as SLURM's executor does
    Workflow.local_exec = property(lambda self: False)
given = {k: int(v) for k, v in (arg.split("=") for arg in sys.argv[4:])}
jobs = {}  # rule -> the most GPUs one of its jobs asks for
shares = {}  # rule -> the most `gpu_share` one of its jobs asks for
each = {}  # rule.wildcards -> [threads, gpu, gpu_share, shortfall's reason or ""]
schedule = JobScheduler.schedule


def validated(scheduler):
    # A dry run skips the check that stops a real run whose job asks for more than the run
    # has ("Job needs gpu=2 but only gpu=1 are available"): make it for every job here.
    # (Snakemake 9.27 also caps a job's resources at the run's; the rule asks for no more.)
    for job in scheduler.workflow.dag.needrun_jobs():
        scheduler.validate_job(job)
        for asked, key in ((jobs, "gpu"), (shares, "gpu_share")):
            value = job.scheduler_resources.get(key, 0)
            asked[job.rule.name] = max(asked.get(job.rule.name, 0), value)
        name = ".".join([job.rule.name, *map(str, job.wildcards_dict.values())])
        resources = [job.scheduler_resources.get(k, 0) for k in ("gpu", "gpu_share")]
        why = [job.resources.get(key, "") for key in ("shortfall", "unjudged")]
        each[name] = [job.threads, *resources, *why]
    return schedule(scheduler)


JobScheduler.schedule = validated
with SnakemakeApi(OutputSettings()) as api:
    workflow_api = api.workflow(
        snakefile=Path("Snakefile"),
        resource_settings=ResourceSettings(cores=2, resources=given),
        config_settings=ConfigSettings(config={"preset": sys.argv[2]}),
    )
    workflow = workflow_api._workflow
    asked = [workflow.get_rule("autopar").resources["gpu"].value]
    limit = workflow.global_resources.get("gpu").value
    share_limit = workflow.global_resources.get("gpu_share").value
    if sys.argv[3] == "remote":  # what the jobs that share would ask (a plan runs local rules)
        for rule in ("lr_schedules_run", "warmup_sweep"):
            for asked, key in ((jobs, "gpu"), (shares, "gpu_share")):
                asked[rule] = workflow.get_rule(rule).resources[key].evaluate(None).value
    else:
        workflow_api.dag(DAGSettings(forceall=True)).execute_workflow(
            executor="local", pseudo_executor="dryrun"
        )
planned = {"limit": limit, "share_limit": share_limit, "rules": asked, "jobs": jobs}
print("PLANNED", json.dumps(planned | {"shares": shares, "each": each}))
"""


def plan_on_gpus(repo, gpus, preset, given, remote=False):
    """Plan a dry run as a machine with ``gpus`` GPUs would (submitting the jobs to a cluster
    if ``remote``), under ``--resources`` ``given``,
    checking every job against the run's resources as a real run does: the run's `gpu` and
    `gpu_share` limits, what autopar asks for (2), the most `gpu` and `gpu_share` each rule's
    jobs ask for, and each job's threads, `gpu`, `gpu_share` and planned shortfall (``each``,
    by rule and wildcards)."""
    result = subprocess.run(
        [sys.executable, "-c", PLAN_ON_GPUS, str(gpus), preset, str(remote and "remote"), *given],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("PLANNED "))
    return json.loads(line.removeprefix("PLANNED "))


@pytest.mark.parametrize(
    "gpus, given, limit, asked",
    [
        # the parameter servers and 2-device runs need 2 GPUs: not applicable, planned; the
        # 1-device runs then share the GPU, asking for none of their own
        (1, [], 1, [1, 0, 0]),
        (2, [], 2, [2, 2, 2]),
        (2, ["gpu=1"], 1, [1, 0, 0]),
        (8, ["gpu=4"], 4, [2, 4, 2]),
        (2, ["gpu=0"], 0, [0, 0, 0]),
        (0, ["gpu=1"], 1, [1, 1, 1]),  # a login node: the book preset asks for what it wants
        (0, [], None, [2, 8, 1]),  # data-parallel runs, whose time is unjudged here: one
    ],
)
def test_a_job_asks_for_no_more_gpus_than_the_run_has(repo, gpus, given, limit, asked):
    """The machine's GPUs are Snakemake's `gpu` resource unless the user gave one
    (--resources gpu=N); a job asks for at most as many, so that the run plans and finishes
    (a job given fewer GPUs than it wants finds the rest not applicable). ``asked``: the most
    GPUs a job of autopar, parameter_server and data_parallel_run asks for."""
    planned = plan_on_gpus(repo, gpus, "book", given)
    assert planned["limit"] == limit
    rules = ("parameter_server", "data_parallel_run")
    assert [planned["rules"][0], *(planned["jobs"][rule] for rule in rules)] == asked
    assert max(planned["jobs"].values()) <= (8 if limit is None else limit)


@pytest.mark.parametrize("gpus, given", [(1, []), (2, ["gpu=1"])])
def test_a_job_short_of_devices_is_planned_light(repo, gpus, given):
    """On a machine (or a run) of one GPU, the parameter servers take one core and no GPU,
    and carry the reason; the book's one-process code runs what one device can on one core
    and a share of the GPU; so do the 1-device runs, whose times no claim judges without a
    2-device run, and their `unjudged` resource says why. The 2-device runs and the cost
    model's printed examples run 2 workers sharing a share of the GPU, a core each, and
    their times are unjudged too."""
    each = plan_on_gpus(repo, gpus, "book", given)["each"]
    why = "needs 2 devices, the job that measured it could use 1 (1 GPU)"
    assert each["parameter_server"] == [1, 0, 0, why, ""]
    assert each["single_process"] == [1, 0, 1, why, ""]
    for name in ("data_parallel_run.lenet.2.0", "cost_model"):
        assert each[name] == [2, 0, 1, "", why], name
    for run in ("lenet.1", "resnet18.1", "resnet18_momentum.1"):
        assert each[f"data_parallel_run.{run}.0"] == [1, 0, 1, "", why], run


@pytest.mark.parametrize("preset", ["cpu", "book"])
def test_without_a_gpu_the_book_s_one_process_code_is_planned_light(repo, preset):
    """It needs GPUs, which cores do not stand in for: one core, no GPU (under the book preset
    too, which asks for GPUs where the machine has none, as a cluster's login node), and the
    reason. No claim judges the data-parallel runs' or the cost model's time without 2 GPUs:
    they train on the cores, a core for each worker, beside other jobs."""
    each = plan_on_gpus(repo, 0, preset, [])["each"]
    why = "needs 2 GPUs, the job that measured it could use none"
    assert each["single_process"] == [1, 0, 0, why, ""]
    # (the book preset asks a cluster for a GPU)
    assert each["data_parallel_run.lenet.1.0"] == [1, int(preset == "book"), 0, "", why]
    assert each["data_parallel_run.lenet.2.0"][0] == each["cost_model"][0] == 2
    assert each["data_parallel_run.lenet.2.0"][-1] == each["cost_model"][-1] == why


@pytest.mark.e2e
@pytest.mark.skipif(
    not shutil.which("taskset") or len(os.sched_getaffinity(0)) < 2, reason="needs taskset, 2 cores"
)
def test_a_host_short_of_devices_reruns_nothing_another_measured(smoke_run, tmp_path, mirror):
    """The parameter servers and a 1-device run, measured on 2 cores by the smoke run; planned
    again on 1 core, where the first would be light, nothing is to be done: what the plan finds
    goes to the job as resources, which Snakemake does not compare, and the job's inputs stay
    the same."""
    tree = tmp_path / "repo"
    shutil.copytree(smoke_run, tree, symlinks=True)
    targets = [
        "results/multidevice/parameter_server/metrics.csv",
        "results/multidevice/data_parallel/lenet.1.seed0.csv",
    ]
    config = ["--config", "preset=smoke", f"data_mirror={mirror}"]
    one_core = ["taskset", "-c", "0", sys.executable, "-m", "snakemake", "-n", "--cores", "1"]
    done = subprocess.run(
        [*one_core, *config, "--", *targets],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Nothing to be done" in done.stdout + done.stderr


@pytest.mark.parametrize("gpus", [2, 0])
def test_a_job_with_its_devices_is_not_light(repo, gpus):
    """Two GPUs, or two cores of a machine without GPUs, run the 2-device jobs, and on 2 GPUs
    the 1-device runs time alone beside them (without GPUs, the book's one-process code is
    light, and no claim judges a data-parallel time: tested above)."""
    each = plan_on_gpus(repo, gpus, "cpu", [])["each"]
    light = {name for name, (*_, short, _) in each.items() if short}
    assert each and light == (set() if gpus else {"single_process"})
    assert each["parameter_server"][:2] == [2, gpus]
    if gpus:
        assert not any(unjudged for *_, unjudged in each.values())
        assert each["data_parallel_run.lenet.1.0"][:2] == [2, 1]


SHARING_RULES = ("lr_schedules_run", "warmup_sweep")


@pytest.mark.parametrize(
    "gpus, given, share_limit, shared",
    [
        (1, [], 4, 1),  # jobs_per_gpu (4) at once on the GPU
        (2, [], 8, 1),
        (2, ["gpu=1"], 4, 1),  # as on one GPU
        (2, ["gpu=3"], 8, 1),  # no more than the GPUs there are hold
        (2, ["gpu=0"], 0, 0),  # no GPU: they train on the CPU
        (2, ["gpu_share=2"], 2, 1),
    ],
)
def test_jobs_that_only_train_share_a_gpu_that_jobs_that_time_keep(
    repo, gpus, given, share_limit, shared
):
    """The lr-schedule runs and the warm-up sweep ask for no `gpu` but one `gpu_share`, of
    which the run has N GPUs x jobs_per_gpu; every job that asks for a `gpu` is a timing job,
    which takes every core, so that none runs beside a job that shares."""
    planned = plan_on_gpus(repo, gpus, "book", given)
    assert planned["share_limit"] == share_limit
    for rule in SHARING_RULES:
        assert (planned["jobs"][rule], planned["shares"][rule]) == (0, shared), rule
    # and, where the run has one GPU only, the jobs that run what one device can
    one_device = {"cost_model", "single_process", "data_parallel_run"}
    assert {r for r, n in planned["shares"].items() if n} <= {*SHARING_RULES, *one_device}
    assert {r for r, n in planned["jobs"].items() if n} <= set(TIMING_RULES)


@pytest.mark.parametrize("gpus", [0, 1])  # a login node without GPUs, or with one
def test_on_a_cluster_jobs_that_only_train_ask_for_a_gpu_of_their_own(repo, gpus):
    """Submitted to a cluster, they ask for the `gpu` that SLURM allocates (its allocation
    is then the claim)."""
    planned = plan_on_gpus(repo, gpus, "book", [], remote=True)
    for rule in SHARING_RULES:
        assert (planned["jobs"][rule], planned["shares"][rule]) == (1, 0), rule


RULE_OUTPUTS = """
import json
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.io import is_flagged
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

with SnakemakeApi(OutputSettings()) as api:
    workflow = api.workflow(
        snakefile=Path("Snakefile"),
        resource_settings=ResourceSettings(cores=1),
        config_settings=ConfigSettings(config={"preset": "smoke"}),
    )._workflow
    print(json.dumps([
        [str(f), *((str(f.flags["report"].caption), f.flags["report"].category)
                   if is_flagged(f, "report") else (None, None))]
        for rule in workflow.rules
        for f in rule.output
    ]))
"""


def rule_outputs(repo) -> list[tuple]:
    """(path, report caption, report category) of every rule output of the smoke workflow,
    loaded through Snakemake's API; caption and category None where it is not flagged."""
    result = subprocess.run(
        [sys.executable, "-c", RULE_OUTPUTS], cwd=repo, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return [tuple(row) for row in json.loads(result.stdout.splitlines()[-1])]


def test_the_ledger_lists_exactly_the_figures_the_rules_draw(repo):
    """Every figure of the ledger is drawn by a rule, once, and every figure a rule draws is
    in the ledger and flagged for snakemake --report by figure() (with a caption)."""
    figures = str(paths.RESULTS / "figures")
    drawn = {path: caption for path, caption, _ in rule_outputs(repo) if path.startswith(figures)}
    listed = claims.figure_files(claims.load(repo / "workflow" / "claims.yaml"))
    assert sorted(set(listed)) == sorted(listed), "a figure listed twice"
    assert sorted(set(listed) - set(drawn)) == [], "in the ledger, drawn by no rule"
    assert sorted(set(drawn) - set(listed)) == [], "drawn by a rule, not in the ledger"
    unflagged = sorted(f for f, caption in drawn.items() if caption is None)
    assert unflagged == [], "drawn without figure()"
    assert all(os.path.exists(caption) for caption in drawn.values())


def test_a_section_without_a_caption_file_takes_the_generic_caption():
    assert paths.caption("intro") == paths.CAPTIONS / "intro.rst"
    assert paths.caption("no_such_section") == paths.SECTION_CAPTION
    assert paths.SECTION_CAPTION.read_text().strip()


# A new book section, as docs/extend.md's "Adding a section" walks through it: the files it
# touches, and what each gains.
TOY_SECTION = {
    "config.yaml": "\ntoy:\n  n: 10\n",
    "workflow/schemas/config.schema.yaml": """
  toy:
    description: The toy section's sum runs to n.
    type: object
    additionalProperties: false
    properties:
      n: {type: integer, minimum: 1}
""",
    "workflow/d2lrepro/optimization/toy.py": '''"""A toy section: 1 + ... + n (toy.sum)."""

from d2lrepro.core import plotting
from d2lrepro.core.results import metric


def measure(n: int) -> list[dict]:
    return [metric("toy.sum", sum(range(1, n + 1)))]


def draw(n: int, path) -> None:
    fig, ax = plotting.figure()
    ks = range(1, n + 1)
    plotting.plot_lines(ax, list(ks), [[sum(range(1, k + 1)) for k in ks]])
    plotting.save(fig, path)
''',
    "workflow/scripts/toy.py": """from d2lrepro.core import results
from d2lrepro.optimization import toy
from d2lrepro.pipeline import job

job.start(snakemake)
results.write_metrics(toy.measure(snakemake.params.n), snakemake.output.metrics)
toy.draw(snakemake.params.n, snakemake.output.sums)
""",
    "workflow/rules/optimization.smk": """
TOY = paths.experiment("optimization", "toy")


rule toy:
    input:
        code=code("toy"),
    output:
        metrics=TOY / "metrics.csv",
        machines=machines_of(TOY / "metrics.csv"),
        sums=figure("toy", "sums"),
    log:
        "logs/toy.log",
    benchmark:
        "benchmarks/toy.tsv"
    conda:
        ENV
    threads: 1
    resources:
        **needs(1000, 5),
    params:
        n=S["toy"]["n"],
    script:
        "../scripts/toy.py"
""",
    "workflow/claims.yaml": """
  - id: toy
    title: A toy section
    chapter: optimization
    sources: [{id: book, at: "none: the walkthrough of docs/extend.md"}]
    summary: The sum of the first n integers.
    figures:
      - {name: sums, caption: "1 + ... + k for k up to n."}
    claims:
      - id: toy.sum
        kind: output
        premise: none
        claimed_by: book
        headline: The first ten integers sum to 55
        statement: 1 + 2 + ... + 10 is 55.
        printed: "55"
        evidence: results/optimization/toy/metrics.csv
        checks:
          - {kind: exact, metric: toy.sum, expected: 55, decimals: 0}
""",
}


@pytest.mark.e2e
def test_a_new_section_reaches_the_report_touching_only_its_files(smoke_run, mirror, tmp_path):
    """Copied after a full run, the workflow gains a section: only its rule and the claims,
    report and archive rules run, and its claim and figure reach the report."""
    workdir = tmp_path / "repo"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    for name, text in TOY_SECTION.items():
        path = workdir / name
        if name == "workflow/schemas/config.schema.yaml":
            schema = path.read_text()
            text = schema.replace("\nproperties:\n", "\nproperties:" + text, 1)
        elif path.exists():
            text = path.read_text() + text
        path.write_text(text)
    config = ["--cores", "2", "--config", "preset=smoke", f"data_mirror={mirror}"]
    planned = planned_jobs(snakemake(workdir, "-n", *config).stdout)
    assert set(planned) == {"toy", "evaluate_claims", "report", "archive", "all"}
    snakemake(workdir, *config)
    table = pd.read_csv(workdir / "results" / "claims.csv").set_index("id")
    assert table.loc["toy.sum", "verdict"] == claims.REPRODUCED
    html = (workdir / "results" / "report.html").read_text()
    assert "A toy section" in html and 'id="fig-toy-sums"' in html
    assert len(TOY_SECTION) == 6


def test_snakemake_report_shows_every_section_in_the_book_s_order(repo):
    """Each section is a category of `snakemake --report` holding its claims page, those
    without a figure (data, async) too, and the categories sort (as text, as the report
    does) in the ledger's order, "10." after "09."."""
    flagged = [(path, category) for path, _, category in rule_outputs(repo) if category]
    ledger = claims.load(repo / "workflow" / "claims.yaml")
    titles = claims.section_categories(ledger)
    pages = {path: category for path, category in flagged if path.startswith("results/claims/")}
    assert pages == {str(paths.claims_table(s)): titles[s] for s in titles}
    figureless = [s["id"] for s in ledger["sections"] if not s.get("figures")]
    assert {"data", "async"} <= set(figureless)
    shown = {category for _, category in flagged}
    assert {titles[s] for s in figureless} <= shown
    in_order = ["0. Claims", *titles.values()]
    assert sorted(shown) == in_order
