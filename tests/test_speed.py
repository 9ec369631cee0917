"""The CPU speed benchmark (tests/speed.py): the book's data path against ours, on a few
synthetic images."""

import torch

import speed
from d2lrepro.core import data


def raw(n=64):
    g = torch.Generator().manual_seed(0)
    return {
        "train_images": torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g),
        "train_labels": torch.randint(0, 10, (n,), generator=g),
        "test_images": torch.zeros((8, 28, 28), dtype=torch.uint8),
        "test_labels": torch.zeros(8, dtype=torch.long),
    }


def test_book_dataset_gives_the_same_pixels_as_our_tensors():
    r = raw()
    ours = data.prepare_data(r)
    x, y = speed.BookFashionMNIST(r["train_images"], r["train_labels"])[5]
    assert torch.equal(x, ours.train_x[5]) and y == int(ours.train_y[5])


def test_memory_batches_cover_every_example_once():
    fashion = data.prepare_data(raw(70))
    ys = torch.cat([y for _, y in speed.memory_batches(fashion, 16, seed=0)])
    assert sorted(ys.tolist()) == sorted(fashion.train_y.tolist())


def test_timed_epoch_reports_data_time():
    r = raw()
    result = speed.timed_epoch(speed.book_batches(r, 16, workers=0, seed=0), lr=0.1, seed=0)
    assert 0 < result["data_seconds"] < result["seconds"] and result["samples_per_s"] > 0
