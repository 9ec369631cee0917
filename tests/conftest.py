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


def judged(claim_id: str, rows, environment: dict | None = None) -> dict:
    """The shipped ledger's judgement of ``claim_id`` on the metric ``rows`` (dicts or a frame)
    on ``environment`` (by default a 2-core machine without GPUs): verdict, measured, reason."""
    import pandas as pd

    from d2lrepro.pipeline import claims

    claim = shipped_claims()[claim_id]
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    env = environment or {"cuda_devices": 0, "usable_cores": 2}
    return claims.evaluate_claim(claim, frame, env)


def verdict_of(claim_id: str, rows, environment: dict | None = None) -> str:
    """The verdict of :func:`judged`: mutation tests break the code a claim is about and expect
    "not reproduced"."""
    return judged(claim_id, rows, environment)["verdict"]


def skip_unless_reproduced(claim_id: str, rows, environment: dict | None = None) -> None:
    """A mutation shows something only where the unbroken code reproduces the claim: elsewhere
    the test is skipped with the verdict (the report is where that verdict is a finding)."""
    from d2lrepro.pipeline import claims

    unbroken = judged(claim_id, rows, environment)
    if unbroken["verdict"] != claims.REPRODUCED:
        pytest.skip(f"{claim_id} unbroken reads {unbroken['verdict']}: {unbroken['reason']}")
