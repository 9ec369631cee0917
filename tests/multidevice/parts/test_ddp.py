"""Concise multi-device training: ResNet-18, SGD, DDP (d2lrepro.multidevice.parts.ddp)."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

from d2lrepro.multidevice.parts import ddp

CPU = torch.device("cpu")


def test_a_worker_s_resnet_starts_from_the_book_s_init_of_its_seed():
    state = torch.get_rng_state()
    net, optimizer, _ = ddp.concise_setup(3, 0.1, CPU, momentum=0.9, weight_decay=5e-4)
    assert torch.equal(state, torch.get_rng_state())  # the global RNG is left alone
    again, _, _ = ddp.concise_setup(3, 0.1, CPU)
    other, _, _ = ddp.concise_setup(4, 0.1, CPU)
    assert all(
        torch.equal(a, b) for a, b in zip(net.state_dict().values(), again.state_dict().values())
    )
    assert not torch.equal(net.fc[1].weight, other.fc[1].weight)
    assert 0.009 < float(net.fc[1].weight.detach().std()) < 0.011  # Normal(0, 0.01)
    assert isinstance(optimizer, torch.optim.SGD)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.1, 0.9, 5e-4)
    assert {id(p) for p in group["params"]} == {id(p) for p in net.parameters()}


def batch(n=5):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def seeded_linear():
    """The same small net every time, drawn apart from the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Linear(4, 3)


def single_device_step(lr):
    """The parameters after one SGD step on the mean loss of the whole batch."""
    net = seeded_linear()
    X, y = batch()
    F.cross_entropy(net(X), y).backward()
    with torch.no_grad():
        return [p - lr * p.grad for p in net.parameters()]


def test_one_worker_steps_on_the_mean_loss_of_the_global_batch():
    net = seeded_linear()
    model, optimizer, step = ddp.ddp_setup(net, 0.5, CPU)
    assert model is net and not dist.is_initialized()  # one worker: no DDP
    X, y = batch()
    logits, loss = step(X, y, len(X))
    assert torch.allclose(loss, F.cross_entropy(seeded_linear()(X), y, reduction="sum"))
    assert logits.shape == (5, 3) and not logits.requires_grad
    for got, expected in zip(net.parameters(), single_device_step(0.5)):
        torch.testing.assert_close(got.detach(), expected)


def _ddp_step(rank, world, store, out):
    """One of two workers: its uneven shard of the batch (3 rows, then 2), one step."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    X, y = batch()
    rows = torch.tensor_split(torch.arange(len(X)), world)[rank]
    net, _, step = ddp.ddp_setup(seeded_linear(), 0.5, CPU)
    step(X[rows], y[rows], len(X))
    torch.save([p.detach() for p in net.parameters()], f"{out}.{rank}")
    dist.destroy_process_group()


def test_two_workers_with_uneven_shards_take_the_single_device_step(tmp_path):
    """DDP averages the workers' gradients; the step's scale makes that the gradient of the
    mean loss over the global batch, as DataParallel computes it."""
    mp.spawn(_ddp_step, args=(2, tmp_path / "store", tmp_path / "params"), nprocs=2)
    expected = single_device_step(0.5)
    for rank in (0, 1):
        params = torch.load(tmp_path / f"params.{rank}", weights_only=True)
        for got, want in zip(params, expected):
            torch.testing.assert_close(got, want)
