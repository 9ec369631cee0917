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
    """Pretend this machine has ``n`` CUDA devices: ``cuda_count(n)``."""
    from d2lrepro import devices

    def fake(n):
        monkeypatch.setattr(devices, "cuda_count", lambda: n)

    return fake
