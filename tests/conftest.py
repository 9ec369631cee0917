import functools
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


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
    """The mutated code's numbers must fail the claim; a failure shows what was judged."""
    from d2lrepro.pipeline import claims

    broken = judged(claim_id, rows, environment)
    assert broken["verdict"] == claims.NOT_REPRODUCED, f"{claim_id}: {broken['measured']}"


def skip_unless_reproduced(claim_id: str, rows, environment: dict | None = None) -> None:
    """A mutation shows something only where the unbroken code reproduces the claim: elsewhere
    the test is skipped with the verdict (the report is where that verdict is a finding)."""
    from d2lrepro.pipeline import claims

    unbroken = judged(claim_id, rows, environment)
    if unbroken["verdict"] != claims.REPRODUCED:
        pytest.skip(f"{claim_id} unbroken reads {unbroken['verdict']}: {unbroken['reason']}")


@pytest.fixture(autouse=True)
def started_by_hand(monkeypatch):
    """Tests run as a run started by hand, which claims its GPUs, even inside a cluster job
    that Snakemake's executor submitted (whose allocation would be the claim)."""
    from d2lrepro.core import gpu_locks

    monkeypatch.delenv(gpu_locks.SUBMITTED, raising=False)
