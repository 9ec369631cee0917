import fcntl
import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from d2lrepro.core.results import diverged

REPO = Path(__file__).resolve().parents[1]


# The files whose tests take minutes, first: a worker starts each of them while the others take
# the rest (pytest-xdist hands out whole files in the order they were collected, as
# --no-loadscope-reorder in pyproject.toml asks).
SLOW_FILES = ("test_slurm.py", "test_workflow.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name not in SLOW_FILES)  # stable: the rest as found


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): a worker per core, each given a test file at a time
    (`--dist loadfile`: a file's tests share its module fixtures, test_slurm.py's one cluster);
    one worker where CUDA is, so that no test's GPU timing runs beside another's."""
    import torch

    from d2lrepro.core.shortfall import usable_cores

    return 1 if torch.cuda.is_available() else usable_cores()


@pytest.fixture(scope="session")
def repo(tmp_path_factory) -> Path:
    """The checkout as a fresh clone has it: a copy without what a run wrote in it (a results
    tree keeps its preset, and a test that plans another would stop there)."""
    copy = tmp_path_factory.mktemp("checkout") / "repo"
    shutil.copytree(REPO, copy, ignore=lambda _, names: [n for n in names if n in OUTPUTS])
    return copy


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The local data mirror: $D2L_DATA_MIRROR, else ../shared/data beside the checkout."""
    path = Path(os.environ.get("D2L_DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
    if not (path / "fashion-mnist").is_dir():
        pytest.skip(f"no data mirror at {path} (set D2L_DATA_MIRROR)")
    return path


@pytest.fixture(scope="session")
def fashion_mnist_files(mirror) -> list[Path]:
    """The mirror's four Fashion-MNIST IDX files, in the order prepare_fashion_mnist takes them
    (the registry's: train images, train labels, test images, test labels)."""
    from d2lrepro.core import fetch

    return [
        mirror / f.mirror_path for f in fetch.FILES.values() if f.mirror_path.startswith("fashion")
    ]


@pytest.fixture
def cuda_count(monkeypatch):
    """Pretend this machine has ``n`` CUDA devices, none of them hidden by
    CUDA_VISIBLE_DEVICES (which makes reasons count a job's GPUs): ``cuda_count(n)``. It
    reaches every module that asks devices.cuda_count(); CUDA itself is not faked."""
    from d2lrepro.core import devices

    def fake(n):
        monkeypatch.setattr(devices, "cuda_count", lambda: n)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    return fake


@pytest.fixture(scope="module")
def cuda():
    """CUDA for a module of CUDA tests (``pytest.mark.usefixtures("cuda")``): this machine's
    where it has CUDA, else the fake of tests/fake_cuda.py (2 GPUs whose tensors live on the
    CPU), so that the tests run everywhere and at least bind and run the code."""
    import fake_cuda

    with fake_cuda.cuda_here():
        yield


@pytest.fixture
def cpu_only(monkeypatch):
    """A machine without GPUs, for tests that mean the CPU wherever they run: torch in this
    process finds no CUDA device, and the processes it starts none either."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@functools.cache
def shipped_claims() -> dict:
    """The shipped ledger's claims by id, loaded once."""
    from d2lrepro.pipeline import claims

    return {c["id"]: c for s in claims.load()["sections"] for c in s["claims"]}


def measured_on(rows, machine: dict | None = None) -> tuple:
    """Metric ``rows`` (dicts or a frame) as a job on ``machine`` wrote them (by default a
    2-core machine without GPUs; a dict of a machine record's ``usable_cores`` and
    ``cuda_devices``), and the records beside them: the evaluator's two arguments."""
    import pandas as pd

    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    record = {"usable_cores": 2, "cuda_devices": 0} | (machine or {})
    return frame.assign(machine="test-machine"), {"test-machine": record}


def judged(claim_id: str, rows, environment: dict | None = None) -> dict:
    """The shipped ledger's judgement of ``claim_id`` on the metric ``rows`` (dicts or a frame)
    measured on ``environment`` (:func:`measured_on`): verdict, measured, reason."""
    from d2lrepro.pipeline import claims

    return claims.evaluate_claim(shipped_claims()[claim_id], *measured_on(rows, environment))


def verdict_of(claim_id: str, rows, environment: dict | None = None) -> str:
    """The verdict of :func:`judged`: mutation tests break the code a claim is about and expect
    "not reproduced"."""
    return judged(claim_id, rows, environment)["verdict"]


def this_machine() -> dict:
    """The environment claims are judged on, as this machine is (its GPUs and usable cores)."""
    from d2lrepro.core import devices

    return {"cuda_devices": devices.cuda_count(), "usable_cores": devices.usable_cores()}


def assert_not_reproduced(claim_id: str, rows, environment: dict | None = None) -> None:
    """The mutated code's numbers must not reproduce the claim: "not reproduced", or
    inconclusive where their spread reaches the bound; a failure shows what was judged."""
    from d2lrepro.pipeline import claims

    broken = judged(claim_id, rows, environment)
    verdicts = (claims.NOT_REPRODUCED, claims.INCONCLUSIVE)
    assert broken["verdict"] in verdicts, f"{claim_id}: {broken['measured']}"


def skip_unless_reproduced(claim_id: str, rows, environment: dict | None = None) -> None:
    """A mutation shows something only where the unbroken code reproduces the claim: elsewhere
    the test is skipped with the verdict (the report is where that verdict is a finding)."""
    from d2lrepro.pipeline import claims

    unbroken = judged(claim_id, rows, environment)
    if unbroken["verdict"] != claims.REPRODUCED:
        pytest.skip(f"{claim_id} unbroken reads {unbroken['verdict']}: {unbroken['reason']}")


@pytest.fixture(autouse=True)
def started_by_hand(monkeypatch):
    """Tests run as a run started by hand, which locks its GPUs, even inside a cluster job
    that Snakemake's executor submitted (whose allocation would be the lock)."""
    from d2lrepro.core import gpu_locks

    monkeypatch.delenv(gpu_locks.SUBMITTED, raising=False)


@pytest.fixture(autouse=True)
def figures_a_reader_can_read(monkeypatch):
    """Every figure a test draws is read as a reader would (legibility.problems) when it is
    saved: an axis without a label, a line the legend leaves out or a name from the code fails
    the test that drew it."""
    from d2lrepro.core import legibility, plotting

    saved = plotting.save

    def save(fig, path, footer=None):
        assert legibility.problems(fig) == [], path
        saved(fig, path, footer)

    monkeypatch.setattr(plotting, "save", save)


# Shared helpers of the test modules (no test module imports another).

# Files and folders a run writes, left out where a test copies the repository.
OUTPUTS = {
    ".git",
    ".venv",
    ".snakemake",
    "results",
    "resources",
    "logs",
    "benchmarks",
    "__pycache__",
    ".pytest_cache",
}

# The rules whose jobs time what a verdict depends on. They take every core, so the scheduler
# runs nothing beside them.
TIMING_RULES = (
    "hybridize",
    "asynchrony",
    "autopar",
    "hardware",
    "data_parallel_run",
    "cost_model",
    "parameter_server",
    "single_process",
    "airfoil_run",
)


def synthetic(n_train=512, n_test=256, seed=0):
    """Uint8 28x28 images whose class is marked by a bright 4x4 block (easy to learn)."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def make(n):
        labels = torch.randint(0, 10, (n,), generator=g, dtype=torch.uint8)
        images = torch.randint(0, 60, (n, 28, 28), generator=g, dtype=torch.uint8)
        for c in range(10):
            r, k = divmod(c, 5)
            images[labels == c, 4 + 10 * r : 8 + 10 * r, 2 + 5 * k : 6 + 5 * k] = 255
        return images, labels

    tri, trl = make(n_train)
    tei, tel = make(n_test)
    return {"train_images": tri, "train_labels": trl, "test_images": tei, "test_labels": tel}


def fake_fashion_mnist(path, n_train=512, n_test=128, seed=0):
    """:func:`synthetic` images saved as the workflow's prepared Fashion-MNIST."""
    import torch

    torch.save(synthetic(n_train, n_test, seed), path)
    return path


def prepared_data(n=96):
    """Random images of ``n`` training and 32 test examples, prepared as the workflow does."""
    import torch

    from d2lrepro.core import data as datasets

    g = torch.Generator().manual_seed(0)
    raw = {
        "train_images": torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g),
        "train_labels": torch.randint(0, 10, (n,), generator=g),
        "test_images": torch.randint(0, 256, (32, 28, 28), dtype=torch.uint8, generator=g),
        "test_labels": torch.randint(0, 10, (32,), generator=g),
    }
    return datasets.prepare_data(raw)


def cpus(n):
    """``n`` CPU devices, as a one-process multi-device run lists them."""
    import torch

    return [torch.device("cpu")] * n


# A short LeNet run of the multi-device worker.
LENET = ["--model", "lenet", "--epochs", 2, "--batch-size", 64, "--lr", 0.2]


def run(args, nproc=None, timeout=120, module=None):
    """``python -m d2lrepro.multidevice.parts.worker ARGS`` (or another ``module``), under torchrun
    with ``nproc`` workers if given."""
    import subprocess
    import sys

    if module is None:
        from d2lrepro.multidevice.parts import worker as module
    launcher = (
        ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        if nproc
        else []
    )
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    cmd = [sys.executable, *launcher, "-m", module.__name__, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def never_applied(monkeypatch):
    """The mutation: the scheduler is never applied, so every run keeps its constructor's lr."""
    from d2lrepro.optimization import schedulers

    for cls, hooks in (
        (schedulers.BookCustom, ("after_epoch",)),
        (schedulers.BookMultiStep, ("start", "after_epoch")),
    ):
        for hook in hooks:
            monkeypatch.setattr(cls, hook, lambda self, *args: None)


# How busy other processes kept the CPU while a test timed something: a timing claim that
# fails while the cores were shared cannot be judged, and the test says so instead of failing.
# Cores' worth of other work above which a failed timing is not judged.
BUSY = 0.25


def _busy_s() -> float:
    """Seconds of CPU time all processes, and the hypervisor's other guests (steal), have
    used since boot (Linux /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


def timed_alone(fn):
    """``fn()``, and the cores that other processes kept busy on average while it ran."""
    busy, own, start = _busy_s(), time.process_time(), time.perf_counter()
    result = fn()
    others = (_busy_s() - busy) - (time.process_time() - own)
    return result, max(others, 0.0) / (time.perf_counter() - start)


def skip_if_shared(verdict: str, expected: str, others: float, what: str) -> None:
    """Skip, with the reason, when ``verdict`` is not ``expected`` and the cores were shared."""
    if verdict != expected and others > BUSY:
        pytest.skip(f"{what}: other processes kept {others:.2f} cores busy while it was timed")


def training_history(losses, acc=0.8, seconds=2.0, seed=0, rate=100.0, examples=1024, **columns):
    """A run's history as the multi-device workers write it: one row per epoch of ``losses``,
    with any further ``columns`` (``batch_rates``, ``devices_used``, ...)."""
    return pd.DataFrame(
        {
            "seed": seed,
            "epoch": range(1, len(losses) + 1),
            "train_loss": losses,
            "test_acc": acc,
            "seconds": seconds,
            "samples_per_s": examples / seconds,
            "examples": examples,
            "steady_samples_per_s": rate,
            "devices": "1 x CPU core",
            "batch_size": 256,
            "diverged": [diverged(losses[: i + 1]) for i in range(len(losses))],
        }
        | columns
    )


def machine_record(host, gpus):
    """A machine record as a job that could use ``gpus`` GPUs would write it."""
    return {
        "host": host,
        "cpu_model": "Test CPU",
        "usable_cores": 16,
        "threads": 16,
        "cuda_devices": gpus,
        "gpus": ["A GPU"] * gpus,
        "torch_version": "2.13.0",
    }


def node_record(host="node1", cores=2, gpus=0, threads=2) -> dict:
    """A machine record as a job given ``cores`` usable cores and ``threads`` threads on
    ``host`` (16 logical CPUs) writes it: by default a 2-core job without GPUs."""
    return {
        "host": host,
        "cpu_model": "Test CPU",
        "logical_cpus": 16,
        "usable_cores": cores,
        "threads": threads,
        "cuda_devices": gpus,
        "gpus": ["A GPU"] * gpus,
        "torch_version": "2.13.0",
    }


@pytest.fixture(scope="module")
def airfoil_data(mirror):
    """The airfoil data of the mirror, as the workflow prepares it."""
    from d2lrepro.core import data

    return data.prepare_airfoil(mirror / "airfoil" / "airfoil_self_noise.dat")


@pytest.fixture
def notes(monkeypatch) -> dict:
    """Each figure's note (what it lacks, the scale it ran at) by the figure's file stem, ""
    where it has none, as the figures are saved (and still drawn) during the test."""
    from d2lrepro.core import plotting

    found, saved = {}, plotting.save

    def save(fig, path, footer=None):
        said = [t.get_text() for t in fig.texts if t.get_gid() == plotting.NOTE]
        found[Path(path).stem] = " ".join(said).replace("\n", " ")
        saved(fig, path, footer)

    monkeypatch.setattr(plotting, "save", save)
    return found


@pytest.fixture
def footers(monkeypatch) -> dict:
    """Each figure's footer by the figure's file stem, as the figures are saved (and still
    drawn) during the test."""
    from d2lrepro.core import plotting

    found, saved = {}, plotting.save

    def save(fig, path, footer=None):
        found[Path(path).stem] = footer
        saved(fig, path, footer)

    monkeypatch.setattr(plotting, "save", save)
    return found


# Archives of runs, as the comparison of runs reads them (rule compare).
ARCHIVED_LEDGER = """\
sections:
  - id: s
    title: Timings <b>bold</b>
    claims:
      - {id: s.fast, kind: measurement, statement: A is faster, printed: "2x",
         evidence: results/s/metrics.csv,
         checks: [{kind: ratio_above, numerator: a, denominator: b, bound: 1.5}]}
      - {id: s.same, kind: measurement, statement: "<script>alert(1)</script>", printed: "1",
         evidence: results/s/metrics.csv, checks: [{kind: below, metric: c, bound: 5}]}
      - {id: s.extra, kind: output, statement: Only in one run, printed: "0",
         evidence: results/s/metrics.csv, checks: [{kind: exact, metric: c, expected: 1}]}
"""
ARCHIVED_ENV = {
    "cpu_model": "CPU one",
    "usable_cores": 2,
    "logical_cpus": 2,
    "torch_version": "2.13.0",
}


def archived_claim_row(claim_id, statement, verdict):
    """A row of an archived run's claims table, in section s; s.fast has a headline, the others
    none (as in archives written before claims had one)."""
    from d2lrepro.pipeline import claims

    return {
        "id": claim_id,
        "section": "s",
        "kind": "measurement",
        "headline": "A & B: A is faster" if claim_id == "s.fast" else "",
        "statement": statement,
        "printed": "2x",
        "measured": f"measured for {claim_id}",
        "verdict": verdict,
        "reason": "" if verdict == claims.REPRODUCED else "failed: a / b",
        "device": "cpu",
        "evidence": "results/s/metrics.csv",
    }


def archived_run(tmp_path, name, verdicts, metrics, host="box", env=ARCHIVED_ENV, losses=None):
    """An archive of a run whose claims have ``verdicts`` (id -> verdict), measuring
    ``metrics`` (name -> value); ``losses``: airfoil loss curves by setting."""
    import json

    from d2lrepro.core import paths
    from d2lrepro.pipeline import archive

    root = tmp_path / name
    statements = {"s.fast": "A is faster", "s.same": "<script>alert(1)</script>"}
    table = pd.DataFrame(
        [
            archived_claim_row(i, statements.get(i, "Only in one run"), v)
            for i, v in verdicts.items()
        ]
    )
    files = {
        archive.LEDGER: ARCHIVED_LEDGER,
        archive.CLAIMS: table.to_csv(index=False),
        archive.ENVIRONMENT: json.dumps(env),
        "results/s/metrics.csv": pd.DataFrame(
            {"metric": list(metrics), "value": list(metrics.values())}
        ).to_csv(index=False),
    }
    if losses is not None:
        files[str(paths.experiment("optimization", "airfoil") / "losses.csv")] = losses.to_csv(
            index=False
        )
    for member, text in files.items():
        (root / member).parent.mkdir(parents=True, exist_ok=True)
        (root / member).write_text(text)
    path = tmp_path / f"{name}.zip"
    run = {"host": host, "date": "2026-01-02T00:00:00+00:00", "preset": "smoke", "commit": name}
    archive.write(path, {m: root / m for m in files}, run)
    return archive.read(path)


def two_archived_runs(tmp_path, **kwargs):
    """Two archived runs of different hosts and CPUs: s.fast flips from reproduced to not,
    s.extra is the first run's only; ``kwargs`` go to the first."""
    from d2lrepro.pipeline import claims

    one = archived_run(
        tmp_path,
        "one",
        {"s.fast": claims.REPRODUCED, "s.same": claims.REPRODUCED, "s.extra": claims.REPRODUCED},
        {"a": 3.0, "b": 1.0, "c": 1.0},
        **kwargs,
    )
    two = archived_run(
        tmp_path,
        "two",
        {"s.same": claims.REPRODUCED, "s.fast": claims.NOT_REPRODUCED},
        {"a": 1.2, "b": 1.0, "c": 1.0},
        host="laptop",
        env=ARCHIVED_ENV | {"cpu_model": "CPU two"},
    )
    return [one, two]


BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def snakemake(workdir, *args, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check and result.returncode:
        raise AssertionError(
            f"snakemake {' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}"
        )
    return result


@pytest.fixture(scope="session")
def smoke_run(repo, mirror, tmp_path_factory):
    """A copy of the repository after a run of the smoke preset, shared by the tests that read
    what a run writes: made once for all of pytest-xdist's workers (the first to need it makes
    it, in the folder of this session that holds theirs, while the others wait for it)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    workdir, made = shared / "smoke" / "repo", shared / "smoke" / "made"
    with open(shared / "smoke.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(workdir.parent, ignore_errors=True)  # a run that failed part way
            shutil.copytree(repo, workdir, ignore=lambda d, n: [x for x in n if x in OUTPUTS])
            config = ["--config", "preset=smoke", f"data_mirror={mirror}"]
            snakemake(workdir, "--cores", "2", *config)
            made.touch()
    return workdir


# Figures, for the tests of what a reader sees in them.


def inside(inner, outer) -> bool:
    """Whether the box ``inner`` lies inside ``outer`` (a text inside its panel or figure)."""
    return (
        inner.x0 >= outer.x0 and inner.x1 <= outer.x1 and inner.y0 >= outer.y0
    ) and inner.y1 <= outer.y1


def labelled_figure(**lines) -> tuple:
    """A figure of one panel with a line per keyword (its label; "" for none), axes labelled."""
    from d2lrepro.core import plotting

    fig, ax = plotting.figure()
    for label, y in lines.items():
        ax.plot([0, 1], y, label=label or "_line")
    ax.set(xlabel="epoch", ylabel="loss")
    return fig, ax


@pytest.fixture(scope="module")
def linear_data():
    """300 examples of a noisy linear model of 5 features: an airfoil-like problem in a few
    milliseconds, for the airfoil loop's tests."""
    import torch

    g = torch.Generator().manual_seed(0)
    features = torch.randn(300, 5, generator=g)
    labels = features @ torch.tensor([0.5, -1.0, 0.2, 0.0, 0.3]) + 0.1 * torch.randn(
        300, generator=g
    )
    return {"features": features, "labels": labels}
