"""Datasets: fetching with checksums, IDX parsing and the book's preparation steps."""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import struct
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

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
        _fashion("train-images-idx3-ubyte.gz", 26421880,
                 "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"),
        _fashion("train-labels-idx1-ubyte.gz", 29515,
                 "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"),
        _fashion("t10k-images-idx3-ubyte.gz", 4422102,
                 "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"),
        _fashion("t10k-labels-idx1-ubyte.gz", 5148,
                 "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"),
        DataFile(
            "airfoil_self_noise.dat", "airfoil/airfoil_self_noise.dat", 59984,
            "74c75fd71783f1e6b71f8a622b993dc592897a97cd689c5090a07147a1b097b3",
            ("http://d2l-data.s3-accelerate.amazonaws.com/airfoil_self_noise.dat",
             "https://archive.ics.uci.edu/ml/machine-learning-databases/00291/airfoil_self_noise.dat"),
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


def fetch(spec: DataFile, dest: Path, mirrors: list[str | os.PathLike | None], timeout: float = 60) -> str:
    """Put ``spec`` at ``dest`` from the first source that delivers it intact; return that source."""
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
        f"could not fetch {spec.name} (expected {spec.size} bytes, sha256 {spec.sha256}); tried:\n  - "
        + "\n  - ".join(tried)
    )


# IDX type codes (http://yann.lecun.com/exdb/mnist/): all multi-byte values are big-endian.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class IdxError(ValueError):
    """A file that is not a well-formed IDX file."""


def parse_idx(raw: bytes, name: str = "<bytes>") -> torch.Tensor:
    """Decode an uncompressed IDX file into a tensor of its declared type and shape."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise IdxError(f"{name}: not an IDX file (bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise IdxError(f"{name}: unknown IDX type code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxError(f"{name}: header truncated")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise IdxError(f"{name}: {len(raw) - header} data bytes, shape {shape} needs {expected}")
    array = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return torch.from_numpy(array.astype(dtype.newbyteorder("=")))


def read_idx(path: Path) -> torch.Tensor:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return parse_idx(f.read(), path.name)


def prepare_fashion_mnist(train_images, train_labels, test_images, test_labels) -> dict:
    """The four IDX files as uint8 tensors, checked against each other."""
    data = {
        "train_images": read_idx(train_images),
        "train_labels": read_idx(train_labels),
        "test_images": read_idx(test_images),
        "test_labels": read_idx(test_labels),
    }
    for split in ("train", "test"):
        images, labels = data[f"{split}_images"], data[f"{split}_labels"]
        if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
            raise IdxError(f"{split}: images {tuple(images.shape)} do not fit labels {tuple(labels.shape)}")
    return data


def prepare_airfoil(path: Path, n: int = 1500) -> dict:
    """The book's get_data_ch11: standardize all rows (ddof=0), keep the first n, 5 features."""
    table = np.genfromtxt(path, dtype=np.float32, delimiter="\t")
    if table.ndim != 2 or table.shape[1] != 6 or np.isnan(table).any():
        raise ValueError(f"{path}: expected a tab-separated table of 6 numeric columns")
    table = (table - table.mean(axis=0)) / table.std(axis=0)
    return {"features": torch.from_numpy(table[:n, :-1].copy()), "labels": torch.from_numpy(table[:n, -1].copy())}


def save(obj, path: Path) -> None:
    """torch.save through a temporary file, so an interrupted write leaves nothing behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def mirrors(config_mirror: str | None) -> list[str]:
    """The config's mirror, then $D2L_DATA_MIRROR, skipping unset ones."""
    return [m for m in (config_mirror, os.environ.get("D2L_DATA_MIRROR")) if m]


