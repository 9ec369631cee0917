import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

from conftest import machine_record, shipped_claims, training_history, verdict_of
from d2lrepro.core import reference
from d2lrepro.core.models import LENET_SHAPES, init_normal_, lenet_forward, lenet_params, resnet18
from d2lrepro.multidevice import cost_model, data_parallel, scratch, single_process
from d2lrepro.pipeline import claims
from d2lrepro.pipeline.claims import NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED


def test_allreduce_sums_into_every_tensor():
    data = [torch.ones(1, 2), torch.ones(1, 2) * 2]
    single_process.allreduce(data)
    for tensor in data:
        assert torch.equal(tensor, torch.tensor([[3.0, 3.0]]))

    data = [torch.randn(3, 4) for _ in range(3)]
    total = sum(t.clone() for t in data)
    single_process.allreduce(data)
    for tensor in data:
        assert torch.allclose(tensor, total)


def cpus(n):
    return [torch.device("cpu")] * n


def test_split_batch():
    X = torch.arange(20).reshape(4, 5)
    xs, ys = single_process.split_batch(X, torch.arange(4), cpus(2))
    assert [x.tolist() for x in xs] == [X[:2].tolist(), X[2:].tolist()]
    assert [y.tolist() for y in ys] == [[0, 1], [2, 3]]

    xs, ys = single_process.split_batch(torch.zeros(7, 3), torch.arange(7), cpus(3))
    assert [len(x) for x in xs] == [3, 2, 2]
    assert torch.equal(torch.cat(ys), torch.arange(7))
    xs, _ = single_process.split_batch(torch.zeros(2, 3), torch.zeros(2), cpus(4))
    assert [len(x) for x in xs] == [1, 1, 0, 0]  # always n chunks, unlike torch.chunk


def test_a_worker_shard_is_the_split_batch_chunk():
    X = torch.arange(35).reshape(7, 5)
    chunks, _ = single_process.split_batch(X, torch.arange(7), cpus(3))
    for rank, chunk in enumerate(chunks):
        assert torch.equal(scratch.shard(X, rank, 3), chunk)


def test_split_batch_rejects_mismatched_rows():
    try:
        single_process.split_batch(torch.zeros(4, 2), torch.zeros(3), cpus(2))
    except ValueError as error:
        assert "4 rows" in str(error)
    else:
        raise AssertionError("expected ValueError")


def test_dist_allreduce_without_process_group_is_identity():
    tensor = torch.arange(3.0)
    assert scratch.dist_allreduce_(tensor) is tensor
    assert torch.equal(tensor, torch.arange(3.0))


def test_lenet_params_and_forward():
    params = lenet_params(seed=0)
    assert [tuple(p.shape) for p in params] == list(LENET_SHAPES.values())
    assert all(p.requires_grad for p in params)
    assert all(torch.count_nonzero(p) == 0 for p in params[1::2])
    assert 0.009 < float(params[4].detach().std()) < 0.011
    state = torch.get_rng_state()
    again = lenet_params(seed=0)
    assert torch.equal(state, torch.get_rng_state())
    assert all(torch.equal(a, b) for a, b in zip(params, again))
    assert lenet_forward(torch.zeros(2, 1, 28, 28), params).shape == (2, 10)


def test_resnet18_shape_and_size():
    net = resnet18(num_classes=10, in_channels=1)
    net.eval()
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    count = sum(p.numel() for p in net.parameters())
    assert count == 11_175_818 and round(count / 1e6, 1) == 11.2
    assert not any(isinstance(m, nn.MaxPool2d) for m in net.modules())


def test_init_normal_touches_only_linear_and_conv_weights():
    class MyLinear(nn.Linear):
        pass

    net = nn.Sequential(
        nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.Linear(1000, 200), MyLinear(4, 4)
    )
    before = {k: v.clone() for k, v in net.state_dict().items()}
    init_normal_(net, seed=1)
    after = net.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"0.weight", "2.weight"}
    assert (
        0.009 < float(after["2.weight"].std()) < 0.011
        and abs(float(after["2.weight"].mean())) < 1e-3
    )
    other = init_normal_(nn.Sequential(nn.Conv2d(3, 64, 3)), seed=1)
    assert torch.equal(other[0].weight, after["0.weight"])


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
    scratch.sync_grads(params)
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
    torch.save(scratch.printed_examples(torch.device("cpu")), f"{out}.{rank}")
    dist.destroy_process_group()


def test_printed_examples_are_made_by_two_workers(tmp_path):
    mp.spawn(_examples, args=(2, tmp_path / "store", tmp_path / "rows"), nprocs=2)
    per_rank = [torch.load(tmp_path / f"rows.{r}", weights_only=False) for r in (0, 1)]
    assert per_rank[0] == per_rank[1]  # every worker gets every worker's rows
    values = {row["metric"]: row["value"] for row in per_rank[0]}
    assert sorted(values) == sorted(cost_model.EXAMPLE_METRICS)
    assert values["params.b1_zeros"] == 20 and values["params.b1_grad_is_none"] == 1
    assert all(values[f"allreduce.shard{r}.{j}"] == 3 for r in (0, 1) for j in (0, 1))
    rows = [values[f"scatter.shard{r}.{end}_row"] for r in (0, 1) for end in ("first", "last")]
    assert rows == [0, 1, 2, 3]
    rows = [values[f"split6x4.shard{r}.{end}_row"] for r in (0, 1) for end in ("first", "last")]
    assert rows == [0, 2, 3, 5]


def test_the_printed_b1_comes_through_the_books_get_params(monkeypatch):
    rows = scratch.params_example(torch.device("cpu"))
    assert verdict_of("mgpu.params", rows) == REPRODUCED
    # The book's training takes its per-device copies from the same get_params.
    calls = []
    real = single_process.get_params
    monkeypatch.setattr(single_process, "get_params", lambda p, d: calls.append(d) or real(p, d))
    X, y = _batch(8)
    data = single_process.Data(X, y, X, y)
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
    monkeypatch.setattr(single_process, "get_params", broken)
    rows = scratch.params_example(torch.device("cpu"))
    assert verdict_of("mgpu.params", rows) == NOT_REPRODUCED


def test_every_step_of_the_cost_model_is_built():
    for name in cost_model.STEPS:
        net, step, communicate = cost_model.setup(name, 0, 0.1, torch.device("cpu"))
        x, y = torch.rand(2, 1, 28, 28), torch.tensor([0, 1])
        logits, _ = step(x, y, 2)
        assert logits.shape == (2, 10)
    with pytest.raises(ValueError, match="no cost-model step"):
        cost_model.setup("alexnet", 0, 0.1, torch.device("cpu"))


BOOK = reference.load()
RECORDS = {"m1": machine_record("node1", 1), "m2": machine_record("node2", 2)}


def test_the_summaries_compare_every_pair_and_draw_every_figure(tmp_path, footers):
    """Every row names the machines of the jobs whose data it comes from (a speed-up, both
    runs'), and every figure's footer names those of the data it draws: the 1-device runs ran
    on a job with one GPU, the rest on one with two. The book's one-process runs have their
    own summary, and are drawn beside the data-parallel ones."""

    def write(name, on, **settings):
        h = training_history([2.3, 1.0, 0.8])
        h = h.assign(world_size=1, batch_size=256, lr=0.1, train_acc=0.9, **settings, machine=on)
        h.drop(columns="seed").to_csv(tmp_path / f"{name}.csv", index=False)
        return tmp_path / f"{name}.csv"

    runs = [
        write("lenet.1.seed0", "m1", model="lenet"),
        write("lenet.2.seed0", "m2", model="lenet", steady_samples_per_s=200.0),
        write("resnet18_momentum.1.seed0", "m1", model="resnet18"),
        write("resnet18_momentum.2.seed0", "m2", model="resnet18", seconds=1.5, test_acc=0.7),
    ]
    (tmp_path / "single_process").mkdir()
    book_code = [write(f"single_process/lenet.{n}", "m2", model="lenet") for n in (1, 2)]
    topk = tmp_path / "resnet18_momentum.1.seed0.topk.csv"
    pd.DataFrame(
        {"epoch": 1, "batch": [0, 50], "train_loss": [2.3, 1.1], "top1": [0.1, 0.6], "top5": 0.9}
    ).assign(machine="m1").to_csv(topk, index=False)
    names = ["mgpu_test_acc", "mgpu_epochs", "mgpuc_test_acc", "mgpuc_epochs"]
    figure_paths = {n: tmp_path / f"{n}.png" for n in [*names, "throughput", "topk"]}
    ours, theirs = tmp_path / "metrics.csv", tmp_path / "single_process" / "metrics.csv"
    data_parallel.summarize(runs, book_code, [topk], RECORDS, ours, figure_paths, BOOK)
    single_process.summarize(book_code, theirs, BOOK)
    m = pd.read_csv(ours).set_index("metric")
    assert m.loc["lenet.speedup", "value"] == 2.0
    assert abs(m.loc["resnet18_momentum.acc_change", "value"] + 0.1) < 1e-12
    assert all(path.exists() for path in figure_paths.values())
    assert m.loc["lenet.1.test_acc", "machine"] == "m1"
    assert m.loc["lenet.speedup", "machine"] == "m1 m2"
    assert not m.index.str.startswith("single_process_").any()
    assert "node1" in footers["topk"] and "node2" not in footers["topk"]
    assert all(n in footers["throughput"] for n in ("node1", "node2"))
    book = pd.read_csv(theirs).set_index("metric")
    assert book.loc["single_process_lenet.2.test_acc", "machine"] == "m2"
    assert book.loc["single_process_lenet.speedup", "machine"] == "m2"
    # The book's code ran on a job with 2 GPUs: its claim is judged from its own file.
    judged = claims.evaluate_claim(shipped_claims()["mgpu.2gpu.book"], book.reset_index(), RECORDS)
    assert judged["verdict"] != NOT_APPLICABLE, judged
