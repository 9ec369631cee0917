"""Datasets as the experiments use them: IDX parsing, the book's preparation steps, in-memory
tensors for training, and accuracy; the durable save of prepared data and checkpoints."""

from __future__ import annotations

import gzip
import logging
import math
import os
import pickle
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

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
            raise IdxError(
                f"{split}: images {tuple(images.shape)} do not fit labels {tuple(labels.shape)}"
            )
    return data


def prepare_airfoil(path: Path, n: int = 1500) -> dict:
    """The book's get_data_ch11: standardize all rows (ddof=0), keep the first n, 5 features."""
    table = np.genfromtxt(path, dtype=np.float32, delimiter="\t")
    if table.ndim != 2 or table.shape[1] != 6 or np.isnan(table).any():
        raise ValueError(f"{path}: expected a tab-separated table of 6 numeric columns")
    table = (table - table.mean(axis=0)) / table.std(axis=0)
    return {
        "features": torch.from_numpy(table[:n, :-1].copy()),
        "labels": torch.from_numpy(table[:n, -1].copy()),
    }


def save(obj, path: Path) -> None:
    """torch.save, atomic and durable: the object goes to a temporary file in ``path``'s
    directory, reaches the disk (fsync) before it replaces ``path``, and the directory is
    synced after, so that neither an interrupted write nor a crash of the machine leaves a
    partial file at ``path``; its previous version stays whole until then."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself
    finally:
        os.close(directory)


def load_checkpoint(path: Path | None) -> dict | None:
    """The checkpoint :func:`save` wrote at ``path``, on the CPU; None when there is none, or
    when it cannot be read (written by a machine that crashed before the file reached its
    disk, or copied in part): that file is moved aside to ``<name>.unreadable``, with a
    warning that names it, and the caller trains from the start."""
    if path is None:
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except (RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as error:
        aside = Path(path).with_name(f"{Path(path).name}.unreadable")
        try:
            os.replace(path, aside)
        except FileNotFoundError:  # another worker of the run set it aside first
            pass
        log.warning(
            "checkpoint %s cannot be read (%s); moved to %s, the run starts from the beginning",
            path,
            str(error).splitlines()[0] if str(error) else type(error).__name__,
            aside,
        )
        return None


EVAL_BATCH = 4096


@dataclass
class Data:
    """Images as float32 ``(N, 1, 28, 28)`` in [0, 1] (the book's ``ToTensor``), labels as int64."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    def to(self, device) -> Data:
        device = torch.device(device)
        if self.train_x.device == device and self.test_x.device == device:
            return self
        return Data(*(t.to(device) for t in (self.train_x, self.train_y, self.test_x, self.test_y)))

    def subset(self, train: int | None = None, test: int | None = None) -> Data:
        """The first ``train`` training and ``test`` test examples (``None``: all)."""
        return Data(
            self.train_x[:train], self.train_y[:train], self.test_x[:test], self.test_y[:test]
        )


def _images(images: torch.Tensor) -> torch.Tensor:
    if images.dim() == 3:
        images = images.unsqueeze(1)
    if images.dtype == torch.uint8:
        return images.to(torch.float32).div_(255)
    return images.to(torch.float32)


def prepare_data(
    raw: Mapping[str, torch.Tensor] | Data,
    train_subset: int | None = None,
    test_subset: int | None = None,
    device="cpu",
) -> Data:
    """Turn the prepared dict (``train_images``, ``train_labels``, ``test_images``, ``test_labels``;
    uint8 images ``(N, 28, 28)``) into :class:`Data` on ``device``, keeping the first
    ``train_subset``/``test_subset`` examples. Conversion happens once, after subsetting."""
    if isinstance(raw, Data):
        return raw.subset(train_subset, test_subset).to(device)
    data = Data(
        _images(raw["train_images"][:train_subset]),
        raw["train_labels"][:train_subset].to(torch.int64),
        _images(raw["test_images"][:test_subset]),
        raw["test_labels"][:test_subset].to(torch.int64),
    )
    return data.to(device)


def load_data(
    path, train_subset: int | None = None, test_subset: int | None = None, device="cpu"
) -> Data:
    """:func:`prepare_data` of a ``torch.save``'d dict such as ``results/data/fashion_mnist.pt``."""
    return prepare_data(torch.load(path, weights_only=True), train_subset, test_subset, device)


@torch.no_grad()
def evaluate_accuracy(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = EVAL_BATCH
) -> float:
    """Fraction of ``x`` classified as ``y``, in eval mode; the net's mode is restored."""
    if len(y) == 0:
        return math.nan
    was_training = net.training
    net.eval()
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    for i in range(0, len(y), batch_size):
        correct += (net(x[i : i + batch_size]).argmax(dim=1) == y[i : i + batch_size]).sum()
    net.train(was_training)
    return correct.item() / len(y)
