"""Training on several devices from scratch, one process each
(d2lrepro.multidevice.parts.allreduce_by_hand)."""

import math

import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

from conftest import cpus, verdict_of
from d2lrepro.core.data import Data
from d2lrepro.core.models import lenet_forward, lenet_params
from d2lrepro.multidevice import cost_model, single_process
from d2lrepro.multidevice.parts import allreduce_by_hand
from d2lrepro.pipeline.claims import NOT_REPRODUCED, REPRODUCED


def test_a_worker_shard_is_the_split_batch_chunk():
    X = torch.arange(35).reshape(7, 5)
    chunks, _ = single_process.split_batch(X, torch.arange(7), cpus(3))
    for rank, chunk in enumerate(chunks):
        assert torch.equal(allreduce_by_hand.shard(X, rank, 3), chunk)


def test_dist_allreduce_without_process_group_is_identity():
    tensor = torch.arange(3.0)
    assert allreduce_by_hand.dist_allreduce_(tensor) is tensor
    assert torch.equal(tensor, torch.arange(3.0))


def test_one_worker_has_no_replicas_to_compare():
    assert math.isnan(allreduce_by_hand.replica_gap(lenet_params(seed=0)))


def _gaps(rank, world, store, out):
    """Both workers' gaps for replicas alike, then for a NaN in rank 1's only."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    params = lenet_params(seed=0)
    alike = allreduce_by_hand.replica_gap(params)
    if rank == 1:
        params[0].data[0, 0, 0, 0] = math.nan
    torch.save([alike, allreduce_by_hand.replica_gap(params)], f"{out}.{rank}")
    dist.destroy_process_group()


def test_a_replica_that_went_nan_on_another_worker_is_the_largest_gap(tmp_path):
    mp.spawn(_gaps, args=(2, tmp_path / "store", tmp_path / "gaps"), nprocs=2)
    for rank in (0, 1):
        assert torch.load(tmp_path / f"gaps.{rank}") == [0.0, math.inf]


def _batch(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def _summed_grads(rank, world, store, out):
    """One worker of the from-scratch section: its shard's summed loss, then sync_grads."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    X, y = _batch()
    xs, ys = single_process.split_batch(X, y, cpus(world))
    params = lenet_params(seed=0)
    F.cross_entropy(lenet_forward(xs[rank], params), ys[rank], reduction="none").sum().backward()
    allreduce_by_hand.sync_grads(params)
    torch.save([p.grad for p in params], f"{out}.{rank}")
    dist.destroy_process_group()


def test_two_workers_sum_to_the_single_device_gradient(tmp_path):
    mp.spawn(_summed_grads, args=(2, tmp_path / "store", tmp_path / "grads"), nprocs=2)
    X, y = _batch()
    params = lenet_params(seed=0)
    F.cross_entropy(lenet_forward(X, params), y, reduction="none").sum().backward()
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"grads.{rank}", weights_only=True)
        for grad, param in zip(grads, params):
            assert torch.allclose(grad, param.grad, rtol=1e-4, atol=1e-7)


def _examples(rank, world, store, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.save(allreduce_by_hand.printed_examples(torch.device("cpu")), f"{out}.{rank}")
    dist.destroy_process_group()


def test_printed_examples_are_made_by_two_workers(tmp_path):
    mp.spawn(_examples, args=(2, tmp_path / "store", tmp_path / "rows"), nprocs=2)
    per_rank = [torch.load(tmp_path / f"rows.{r}", weights_only=False) for r in (0, 1)]
    # every worker gets every worker's rows (those not measured hold NaN, equal in place)
    assert pd.DataFrame(per_rank[0]).equals(pd.DataFrame(per_rank[1]))
    values = {row["metric"]: row["value"] for row in per_rank[0]}
    assert sorted(values) == sorted(cost_model.EXAMPLE_METRICS)
    assert values["params.b1_zeros"] == 20 and values["params.b1_grad_is_none"] == 1
    assert all(values[f"allreduce.shard{r}.{j}"] == 3 for r in (0, 1) for j in (0, 1))
    # CPU workers: the book's scatter needs a GPU for each, and nothing stands in for it.
    rows = {row["metric"]: row for row in per_rank[0]}
    for r in (0, 1):
        for end in ("first", "last"):
            row = rows[f"scatter.shard{r}.{end}_row"]
            assert (row["status"], row["note"]) == ("not applicable", allreduce_by_hand.NO_SCATTER)
    rows = [values[f"split6x4.shard{r}.{end}_row"] for r in (0, 1) for end in ("first", "last")]
    assert rows == [0, 2, 3, 5]


def test_the_printed_b1_comes_through_the_books_get_params(monkeypatch):
    rows = allreduce_by_hand.params_example(torch.device("cpu"))
    assert verdict_of("mgpu.params", rows) == REPRODUCED
    # The book's training takes its per-device copies from the same get_params.
    calls = []
    real = allreduce_by_hand.get_params
    monkeypatch.setattr(allreduce_by_hand, "get_params", lambda p, d: calls.append(d) or real(p, d))
    X, y = _batch(8)
    data = Data(X, y, X, y)
    history = single_process.train_scratch(data, cpus(2), epochs=1, batch_size=4, lr=0.1)
    assert len(calls) == 2 and history["train_loss"].notna().all()


def _no_grad_copies(params, device):
    return [p.detach().to(device, copy=True) for p in params]  # forgets requires_grad_()


def _attached_copies(params, device):
    copies = [p.to(device, copy=True) for p in params]  # copies of tensors that need grad
    for p in copies:
        p.requires_grad_()
    return copies


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("broken", [_no_grad_copies, _attached_copies])
def test_a_broken_get_params_fails_the_printed_b1(monkeypatch, broken):
    monkeypatch.setattr(allreduce_by_hand, "get_params", broken)
    rows = allreduce_by_hand.params_example(torch.device("cpu"))
    assert verdict_of("mgpu.params", rows) == NOT_REPRODUCED
