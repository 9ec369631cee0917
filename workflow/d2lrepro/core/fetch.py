"""Fetching the datasets: each file from a local mirror or its canonical URLs, checked against
its size and SHA-256, written atomically."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FASHION_MNIST_URLS = (
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/{}",
    "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/{}",
)


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: where a mirror keeps it, its size, its SHA-256 and its URLs."""

    name: str
    mirror_path: str
    size: int
    sha256: str
    urls: tuple[str, ...]


def _fashion(name: str, size: int, sha256: str) -> DataFile:
    urls = tuple(u.format(name) for u in FASHION_MNIST_URLS)
    return DataFile(name, f"fashion-mnist/{name}", size, sha256, urls)


FILES = {
    f.name: f
    for f in (
        _fashion(
            "train-images-idx3-ubyte.gz",
            26421880,
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        ),
        _fashion(
            "train-labels-idx1-ubyte.gz",
            29515,
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        ),
        _fashion(
            "t10k-images-idx3-ubyte.gz",
            4422102,
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        ),
        _fashion(
            "t10k-labels-idx1-ubyte.gz",
            5148,
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        ),
        DataFile(
            "airfoil_self_noise.dat",
            "airfoil/airfoil_self_noise.dat",
            59984,
            "74c75fd71783f1e6b71f8a622b993dc592897a97cd689c5090a07147a1b097b3",
            (
                "http://d2l-data.s3-accelerate.amazonaws.com/airfoil_self_noise.dat",
                "https://archive.ics.uci.edu/ml/machine-learning-databases/00291/airfoil_self_noise.dat",
            ),
        ),
    )
}


class FetchError(RuntimeError):
    """No source delivered the file with the expected checksum."""


def _copy_verified(stream, dest: Path, spec: DataFile) -> None:
    """Stream into a temporary file beside ``dest``, check size and SHA-256, then rename."""
    digest = hashlib.sha256()
    size = 0
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        actual = digest.hexdigest()
        if size != spec.size or actual != spec.sha256:
            kind = "truncated file" if size < spec.size else "checksum mismatch"
            raise ValueError(
                f"{kind}: got {size} bytes with sha256 {actual}, "
                f"expected {spec.size} bytes with sha256 {spec.sha256}"
            )
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def sources(spec: DataFile, mirrors: list[str | os.PathLike | None]) -> list[str]:
    """Where to look, in order: each mirror directory, then the canonical URLs."""
    return [str(Path(m) / spec.mirror_path) for m in mirrors if m] + list(spec.urls)


def fetch(
    spec: DataFile, dest: Path, mirrors: list[str | os.PathLike | None], timeout: float = 60
) -> str:
    """Put ``spec`` at ``dest`` from the first source that delivers it intact; return that
    source."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tried = []
    for source in sources(spec, mirrors):
        log.info("fetching %s from %s", spec.name, source)
        try:
            if "://" in source:
                with urllib.request.urlopen(source, timeout=timeout) as stream:
                    _copy_verified(stream, dest, spec)
            else:
                with open(source, "rb") as stream:
                    _copy_verified(stream, dest, spec)
        except (OSError, ValueError) as error:
            log.warning("  failed: %s", error)
            tried.append(f"{source}: {error}")
            continue
        log.info("  ok: %s bytes, sha256 %s", spec.size, spec.sha256)
        return source
    raise FetchError(
        f"could not fetch {spec.name} (expected {spec.size} bytes, sha256 {spec.sha256});"
        " tried:\n  - " + "\n  - ".join(tried)
    )


def mirrors(config_mirror: str | None) -> list[str]:
    """The config's mirror, then $D2L_DATA_MIRROR, skipping unset ones."""
    return [m for m in (config_mirror, os.environ.get("D2L_DATA_MIRROR")) if m]
