import subprocess
import sys

import pandas as pd
import torch

from conftest import prepared_data
from d2lrepro.core import results
from d2lrepro.multidevice import single_process


def test_scatter_splits_rows_like_the_book():
    shards = single_process.scatter(torch.arange(20).reshape(4, 5), [torch.device("cpu")] * 2)
    assert [s[:, 0].tolist() for s in shards] == [[0, 5], [10, 15]]


def test_two_copies_take_the_step_of_one_device():
    """The book's one-process path on two (CPU) devices trains like one device: same losses."""
    d = prepared_data()
    one = single_process.train_scratch(d, [torch.device("cpu")], 2, 32, 0.2)
    two = single_process.train_scratch(d, [torch.device("cpu")] * 2, 2, 32, 0.2)
    assert list(one.columns) == results.HISTORY_COLUMNS
    assert torch.allclose(
        torch.tensor(one["train_loss"].values), torch.tensor(two["train_loss"].values), rtol=1e-5
    )
    assert one["test_acc"].tolist() == two["test_acc"].tolist()


def test_the_books_code_runs_on_as_many_gpus_as_its_run_has(cuda_count, tmp_path):
    cuda_count(0)
    runs = {f"lenet.{d}": {"model": "lenet", "devices": d} for d in (1, 2)}
    outputs = {name: tmp_path / f"book_{name}.csv" for name in runs}
    single_process.run_book(runs, 0, tmp_path / "unused.pt", outputs)
    notes = {name: pd.read_csv(path)["note"].iloc[0] for name, path in outputs.items()}
    who = "the job that measured it could use none"
    assert notes == {
        "lenet.1": f"the book's one-process path needs CUDA, {who}",
        "lenet.2": f"the book's one-process path needs 2 GPUs, {who}",
    }


RUN_PLANNED_WITHOUT_GPUS = """
import sys
from d2lrepro.multidevice import single_process

runs = {f"lenet.{d}": {"model": "lenet", "devices": d} for d in (1, 2)}
outputs = {name: f"{sys.argv[1]}/book_{name}.csv" for name in runs}
single_process.run_book(runs, 0, "unused.pt", outputs, planned_gpus=0)
print("torch" in sys.modules)
"""


def test_planned_without_a_gpu_it_says_so_of_each_run_without_starting_torch(tmp_path):
    """The same notes as a job that counts its GPUs itself gives, with none (above)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_PLANNED_WITHOUT_GPUS, str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "False", done.stderr
    notes = {d: pd.read_csv(tmp_path / f"book_lenet.{d}.csv")["note"].iloc[0] for d in (1, 2)}
    who = "the job that measured it could use none"
    assert notes == {
        1: f"the book's one-process path needs CUDA, {who}",
        2: f"the book's one-process path needs 2 GPUs, {who}",
    }
