import gzip
import hashlib
import io
import logging
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from d2lrepro.core import data


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def test_parse_idx_uint8_images():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    parsed = data.parse_idx(idx_bytes(images, 0x08))
    assert parsed.dtype == torch.uint8
    assert torch.equal(parsed, torch.from_numpy(images))


def test_parse_idx_big_endian_int32():
    values = np.array([1, -2, 70000], dtype=np.int32)
    assert data.parse_idx(idx_bytes(values, 0x0C)).tolist() == [1, -2, 70000]


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x00", "bad magic"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00", "unknown IDX type"),
        (b"\x00\x00\x08\x02" + struct.pack(">I", 1), "header truncated"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x00\x01", "2 data bytes, shape"),
    ],
)
def test_parse_idx_rejects_malformed_files(raw, message):
    with pytest.raises(data.IdxError, match=message):
        data.parse_idx(raw)


def test_read_idx_gzip(tmp_path):
    labels = np.array([3, 1, 4], dtype=np.uint8)
    path = tmp_path / "labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(labels, 0x08)))
    assert data.read_idx(path).tolist() == [3, 1, 4]


def test_prepare_airfoil_standardizes_all_rows_before_slicing(tmp_path):
    rng = np.random.default_rng(0)
    table = rng.normal(5.0, 3.0, size=(20, 6)).astype(np.float32)
    path = tmp_path / "airfoil.dat"
    path.write_text("\r\n".join("\t".join(f"{v:.6f}" for v in row) for row in table) + "\r\n")
    prepared = data.prepare_airfoil(path, n=15)
    parsed = np.genfromtxt(path, dtype=np.float32, delimiter="\t")
    expected = (parsed - parsed.mean(axis=0)) / parsed.std(axis=0)
    assert prepared["features"].shape == (15, 5) and prepared["labels"].shape == (15,)
    np.testing.assert_allclose(prepared["features"].numpy(), expected[:15, :5], rtol=1e-6)
    np.testing.assert_allclose(prepared["labels"].numpy(), expected[:15, 5], rtol=1e-6)


def test_real_datasets_parse(mirror, fashion_mnist_files):
    fmnist = data.prepare_fashion_mnist(*fashion_mnist_files)
    assert fmnist["train_images"].shape == (60000, 28, 28)
    assert fmnist["test_labels"].shape == (10000,)
    assert set(fmnist["train_labels"].unique().tolist()) == set(range(10))
    airfoil = data.prepare_airfoil(mirror / "airfoil" / "airfoil_self_noise.dat")
    assert airfoil["features"].shape == (1500, 5)


# What the book's DATA_HUB names of the airfoil file: the first 12 hex digits of its SHA-1,
# its size and shape. The download pins the file by its SHA-256, so these are facts of the
# pinned file, tested here rather than counted as claims of a run.
BOOK_SHA1_HEAD = "76e5be1548fd"


def airfoil_facts(path, prepared: dict) -> dict:
    """The airfoil file's SHA-1 head, size and shape, and how far the rows ``prepared`` are
    from the table standardized over all its rows and over only the rows kept (the book's
    get_data_ch11 standardizes all, so the first is ~0 and the second is not), in float64."""
    raw = Path(path).read_bytes()
    table = np.genfromtxt(io.BytesIO(raw), dtype=np.float64, delimiter="\t")
    x, y = prepared["features"].double().numpy(), prepared["labels"].double().numpy()
    kept = np.hstack([x, y[:, None]])

    def standardized(rows):
        return (table[: len(kept)] - rows.mean(axis=0)) / rows.std(axis=0)

    return {
        "sha1_head": hashlib.sha1(raw).hexdigest()[:12],
        "file_bytes": len(raw),
        "rows": table.shape[0],
        "columns": table.shape[1],
        "gap_to_all_rows": np.abs(kept - standardized(table)).max(),
        "gap_to_kept_rows": np.abs(kept - standardized(table[: len(kept)])).max(),
        "examples": x.shape[0],
        "features": x.shape[1],
    }


def test_airfoil_facts_of_a_small_table(tmp_path):
    path = tmp_path / "airfoil.dat"
    rows = [[1, 2, 3, 4, 5, 1], [2, 1, 0, 1, 2, 3], [3, 3, 1, 0, 1, 2], [0, 1, 2, 2, 2, 0]]
    path.write_text("\n".join("\t".join(map(str, r)) for r in rows) + "\n")
    facts = airfoil_facts(path, data.prepare_airfoil(path, 3))
    assert (facts["rows"], facts["columns"], facts["examples"]) == (4, 6, 3)
    assert facts["gap_to_all_rows"] < 1e-6 < facts["gap_to_kept_rows"]


def test_the_airfoil_file_is_the_one_data_hub_names_and_get_data_ch11_prepares_it(mirror):
    """What the ledger's data.airfoil and data.get_data_ch11 checked: the file is the one the
    book's DATA_HUB names (SHA-1 76e5be1548fd..., 59,984 bytes, 1503 rows of 6 columns), and the
    1500 rows every airfoil run trains on are standardized over all 1503 rows (population std)
    with 5 features: within 1e-4 of that standardization recomputed in float64 (float32
    precision at these magnitudes), and more than 1e-4 from one over the 1500 rows kept."""
    path = mirror / "airfoil" / "airfoil_self_noise.dat"
    facts = airfoil_facts(path, data.prepare_airfoil(path))
    assert facts["sha1_head"] == BOOK_SHA1_HEAD
    assert (facts["file_bytes"], facts["rows"], facts["columns"]) == (59_984, 1503, 6)
    assert (facts["examples"], facts["features"]) == (1500, 5)
    assert facts["gap_to_all_rows"] < 1e-4 < facts["gap_to_kept_rows"]


def test_get_data_ch11_with_the_sample_std_or_the_kept_rows_only_is_told_apart(mirror):
    """The preparation drifting from the book's recipe (the sample std, standardizing only the
    rows kept) moves the rows by more than 1e-4 from the book's standardization."""
    path = mirror / "airfoil" / "airfoil_self_noise.dat"
    table = np.genfromtxt(path, dtype=np.float64, delimiter="\t")
    for drifted in (
        (table - table.mean(axis=0)) / table.std(axis=0, ddof=1),
        (table[:1500] - table[:1500].mean(axis=0)) / table[:1500].std(axis=0),
    ):
        prepared = {
            "features": torch.from_numpy(drifted[:1500, :5].copy()),
            "labels": torch.from_numpy(drifted[:1500, 5].copy()),
        }
        assert airfoil_facts(path, prepared)["gap_to_all_rows"] > 1e-4


def test_other_airfoil_files_are_told_apart(mirror, tmp_path):
    """The same rows with LF line endings (as a text editor or another mirror may save them)
    are another file: its SHA-1 and size are not the ones the book's DATA_HUB names. Two rows
    swapped keep the size and shape: only the SHA-1 tells that file from the book's."""
    book = mirror / "airfoil" / "airfoil_self_noise.dat"
    lf = tmp_path / "airfoil_self_noise.dat"
    lf.write_bytes(book.read_bytes().replace(b"\r\n", b"\n"))
    rows = book.read_bytes().split(b"\r\n")
    rows[0], rows[1] = rows[1], rows[0]
    swapped = tmp_path / "swapped.dat"
    swapped.write_bytes(b"\r\n".join(rows))
    lf_facts = airfoil_facts(lf, data.prepare_airfoil(lf))
    assert lf_facts["sha1_head"] != BOOK_SHA1_HEAD and lf_facts["file_bytes"] != 59_984
    swapped_facts = airfoil_facts(swapped, data.prepare_airfoil(swapped))
    assert swapped_facts["file_bytes"] == 59_984 and swapped_facts["rows"] == 1503
    assert swapped_facts["sha1_head"] != BOOK_SHA1_HEAD


def reference_losses(features, labels) -> tuple[float, float]:
    """The book's half squared error at its least-squares optimum (w and b) and at w = 0,
    b = 0, to 4 decimals."""
    x, y = np.asarray(features, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    design = np.hstack([x, np.ones((len(x), 1))])
    w = np.linalg.lstsq(design, y, rcond=None)[0]
    return round(np.mean((design @ w - y) ** 2 / 2), 4), round(np.mean(y**2 / 2), 4)


def test_the_prepared_airfoil_rows_have_the_reference_losses(mirror):
    """The airfoil claims cite the least-squares optimum 0.2417 (0.4933 at zero) of the 1500
    rows get_data_ch11 keeps: the mirror's rows as prepared have them, and rows standardized
    with ddof=1 or over only the rows kept do not."""
    path = mirror / "airfoil" / "airfoil_self_noise.dat"
    prepared = data.prepare_airfoil(path)
    assert reference_losses(prepared["features"], prepared["labels"]) == (0.2417, 0.4933)
    table = np.genfromtxt(path, delimiter="\t")
    for rows in (
        (table - table.mean(axis=0)) / table.std(axis=0, ddof=1),
        (table[:1500] - table[:1500].mean(axis=0)) / table[:1500].std(axis=0),
    ):
        optimum, zero = reference_losses(rows[:1500, :-1], rows[:1500, -1])
        assert optimum != 0.2417 and zero != 0.4933


def test_save_replaces_the_file_only_once_its_bytes_are_on_disk(tmp_path, monkeypatch):
    path = tmp_path / "run" / "ckpt.pt"
    events = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}")))
    )
    monkeypatch.setattr(os, "replace", lambda *a: (events.append(("replace",)), replace(*a)))
    data.save({"epoch": 1}, path)
    monkeypatch.setattr(os, "fsync", fsync)
    # the file's bytes, then the rename, then the directory entry
    assert events == [("fsync", False), ("replace",), ("fsync", True)]
    assert data.load_checkpoint(path) == {"epoch": 1}
    assert [p.name for p in path.parent.iterdir()] == ["ckpt.pt"]  # no temporary file left


def test_a_crash_before_the_replace_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    data.save({"epoch": 1, "w": torch.ones(1000)}, path)

    def crash(*args):
        raise KeyboardInterrupt  # the job is stopped between the write and the rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        data.save({"epoch": 2, "w": torch.zeros(1000)}, path)
    assert data.load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]
    # a process killed there (no clean-up runs) leaves the previous checkpoint whole too
    code = (
        "import os, sys, torch; from d2lrepro.core import data; "
        "os.replace = lambda *a: os._exit(9); "
        f"data.save({{'epoch': 2, 'w': torch.zeros(1000)}}, {str(path)!r})"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert data.load_checkpoint(path)["epoch"] == 1


def test_an_unreadable_checkpoint_is_set_aside_with_a_warning(tmp_path, caplog):
    path = tmp_path / "ckpt.pt"
    assert data.load_checkpoint(path) is None and data.load_checkpoint(None) is None
    data.save({"epoch": 3, "w": torch.ones(1000)}, path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])  # a copy cut short
    with caplog.at_level(logging.WARNING, logger="d2lrepro.core.data"):
        assert data.load_checkpoint(path) is None
    assert not path.exists()
    assert (tmp_path / "ckpt.pt.unreadable").read_bytes() == raw[: len(raw) // 2]
    [record] = caplog.records
    message = record.getMessage()
    assert str(path) in message and "ckpt.pt.unreadable" in message
    assert "starts from the beginning" in message
    # an empty file (a write the machine never flushed) is set aside as well
    path.write_bytes(b"")
    assert data.load_checkpoint(path) is None and not path.exists()
