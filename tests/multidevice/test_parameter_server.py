"""The parameter-server strategies on gloo workers (CPU processes), and their launch on 2
workers and on all the machine's devices."""

import json
import statistics

import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import fake_cuda
from conftest import judged, machine_record, shipped_claims, verdict_of
from d2lrepro.core import devices, results
from d2lrepro.multidevice import parameter_server
from d2lrepro.multidevice.parts import launcher
from d2lrepro.pipeline.checks import metrics_of
from d2lrepro.pipeline.claims import (
    INCONCLUSIVE,
    NO_SPREAD,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OBSERVED,
    REPRODUCED,
)


def _strategies(rank, world, store, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    mine = torch.arange(6.0) * (rank + 1)  # worker r holds (r + 1) * [0..5]
    gathered, ringed = mine.clone(), mine.clone()
    parameter_server.gather(gathered, parameter_server.inbox(mine, 1, rank, world), rank)
    parameter_server.ring(ringed)
    pushed = {}
    for servers in (1, world):
        pushed[servers] = parameter_server.inbox(mine, servers, rank, world)
        parameter_server.push(mine, servers, rank, pushed[servers])
    rows = parameter_server.measure(1, 2, torch.device("cpu"), prefix=f"p{world}")
    torch.save(
        {"gathered": gathered, "ringed": ringed, "pushed": pushed, "rows": rows}, f"{out}.{rank}"
    )
    dist.destroy_process_group()


def test_every_strategy_gives_every_worker_the_sum(tmp_path):
    mp.spawn(_strategies, args=(2, tmp_path / "store", tmp_path / "out"), nprocs=2)
    got = [torch.load(tmp_path / f"out.{r}", weights_only=False) for r in (0, 1)]
    total = torch.arange(6.0) * 3
    for rank in (0, 1):
        assert torch.equal(got[rank]["gathered"], total) and torch.equal(got[rank]["ringed"], total)
    # One server (worker 0) receives worker 1's whole gradient; with two, each receives its
    # half of the other's.
    assert list(got[0]["pushed"][1]) == [1] and got[1]["pushed"][1] == {}
    assert torch.equal(got[0]["pushed"][1][1], torch.arange(6.0) * 2)
    assert torch.equal(got[0]["pushed"][2][1], torch.arange(3.0) * 2)
    assert torch.equal(got[1]["pushed"][2][0], torch.arange(3.0, 6.0))


@pytest.mark.parametrize("world", [2, 3])
def test_rank_0_reports_every_strategy(tmp_path, world):
    mp.spawn(_strategies, args=(world, tmp_path / "store", tmp_path / "out"), nprocs=world)
    rows = {r["metric"]: r for r in torch.load(tmp_path / "out.0", weights_only=False)["rows"]}
    assert all(torch.load(tmp_path / f"out.{r}", weights_only=False)["rows"] == [] for r in (1,))
    p = f"p{world}"
    assert set(rows) == {r["metric"] for r in parameter_server.unmeasured_rows("x", p)}
    assert rows[f"{p}.workers"]["value"] == world
    for name in ("gather", "ring", "push.n1", "push.split"):
        assert rows[f"{p}.{name}.median_s"]["value"] > 0 and rows[f"{p}.{name}.iqr_s"]["value"] >= 0
    # n servers' time, scaled to one server's load, and the ring's: n times each
    for name in ("push.split", "ring"):
        one, n_times = (rows[f"{p}.{name}{end}.median_s"]["value"] for end in ("", "_x_n"))
        assert n_times == pytest.approx(world * one)
    assert rows[f"{p}.ring.busbw_gbps"]["value"] > 0
    assert rows[f"{p}.host.median_s"]["status"] == "not applicable"
    assert rows[f"{p}.ring_nvlink.busbw_gbps"]["status"] == "not applicable"


def _gathers(rank, world, store, out, cuda):
    torch.set_num_threads(1)
    if cuda:  # without CUDA, this worker's own fake (NCCL on gloo)
        fake_cuda.install_for_good(world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        device_id=device if cuda else None,
    )
    host_group = dist.new_group(backend="gloo")
    mine = torch.arange(6.0, device=device) * (rank + 1)  # worker r holds (r + 1) * [0..5]
    gathered, hosted = mine.clone(), mine.clone()
    received = parameter_server.inbox(mine, 1, rank, world)
    parameter_server.gather(gathered, received, rank)
    on_host = parameter_server.inbox(mine.cpu(), 1, rank, world)
    parameter_server.via_host(hosted, on_host, rank, host_group)
    torch.save(
        {
            "gathered": gathered.cpu(),
            "hosted": hosted.cpu(),
            "received": {w: b.cpu() for w, b in received.items()},
            "on_host": on_host,
        },
        f"{out}.{rank}",
    )
    dist.destroy_process_group()


def gathers(tmp_path, world, cuda=False):
    mp.spawn(_gathers, args=(world, tmp_path / "store", tmp_path / "out", cuda), nprocs=world)
    return [torch.load(tmp_path / f"out.{r}", weights_only=False) for r in range(world)]


def check_gathered_on_worker_0(got, world):
    """Every worker ends with the sum, and worker 0 received each other worker's whole
    gradient: everything went into one worker, as the book's one GPU, not split up."""
    total = torch.arange(6.0) * sum(range(1, world + 1))
    for rank in range(world):
        assert torch.equal(got[rank]["gathered"], total) and torch.equal(got[rank]["hosted"], total)
    for buffers in ("received", "on_host"):
        assert list(got[0][buffers]) == list(range(1, world))
        for w in range(1, world):
            assert torch.equal(got[0][buffers][w], torch.arange(6.0) * (w + 1))
        assert all(got[r][buffers] == {} for r in range(1, world))


def test_the_gather_sends_every_gradient_whole_to_worker_0(tmp_path):
    check_gathered_on_worker_0(gathers(tmp_path, 3), 3)


@pytest.mark.cuda
@pytest.mark.skipif(fake_cuda.GPUS < 2, reason="needs 2 CUDA devices, this machine has 1")
def test_the_gather_sends_every_gradient_whole_to_gpu_0(tmp_path):
    check_gathered_on_worker_0(gathers(tmp_path, 2, cuda=True), 2)


@pytest.fixture
def one_worker(tmp_path):
    """A process group of this process alone (gloo), for the timing's barriers."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'one'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class FakeClock:
    """A clock that moves only by the work it is told of: ``update`` seconds per call of
    :meth:`call`, ``sync`` per wait for the device (a launch-and-sync cost fixed per sample)."""

    def __init__(self, update, sync):
        self.now, self.update, self.sync = 0.0, update, sync

    def __call__(self):
        return self.now

    def call(self):
        self.now += self.update

    def synchronize(self, *devices):
        self.now += self.sync


CPU = torch.device("cpu")


def test_a_sample_divides_its_fixed_cost_by_its_calls(one_worker, monkeypatch):
    clock = FakeClock(update=0.001, sync=0.010)
    monkeypatch.setattr(devices, "synchronize", clock.synchronize)
    assert parameter_server.timed(clock.call, CPU, 3, 1, clock) == pytest.approx([0.011] * 3)
    # Blocks of 1, 2, 4, ... calls take 11, 12, 14, ... ms; 128 calls are the first to take
    # 100 ms (138).
    calls = parameter_server.calls_per_sample(clock.call, CPU, target=0.1, clock=clock)
    assert calls == 128
    per_call = parameter_server.timed(clock.call, CPU, 3, calls, clock)
    assert per_call == pytest.approx([0.001 + 0.010 / 128] * 3)
    assert parameter_server.calls_per_sample(clock.call, CPU, target=10, most=64, clock=clock) == 64


def test_o_m_over_n_is_judged_on_the_work_not_on_the_fixed_cost(one_worker, monkeypatch):
    """8 servers: one server takes 8 ms, each of 8 servers 1 ms (O(m/n) exactly), and every
    sample pays 1.2 ms of launches and waiting. Timed one call a sample, 8 × the split push
    is 1.9 × the one-server push; amortized, about 1. The fake clock's samples are alike, so
    each is given a measured spread of 1% of its median: with none, no timing is judged."""
    n, medians = 8, {}
    for calls in (1, None):
        for name, update in (("n1", 0.008), ("split", 0.008 / n)):
            clock = FakeClock(update, sync=0.0012)
            monkeypatch.setattr(devices, "synchronize", clock.synchronize)
            k = calls or parameter_server.calls_per_sample(clock.call, CPU, clock=clock)
            medians[calls, name] = parameter_server.timed(clock.call, CPU, 5, k, clock)[0]

    def rows(calls, spread=0.01):
        values = {"split_x_n": n * medians[calls, "split"], "n1": medians[calls, "n1"]}
        return [
            results.metric(f"ps.all.push.{name}.{stat}_s", value * share)
            for name, value in values.items()
            for stat, share in (("median", 1.0), ("iqr", spread))
        ]

    assert n * medians[1, "split"] / medians[1, "n1"] == pytest.approx(1.9, abs=0.02)
    assert verdict_of("ps.scale.all", rows(1), GPUS) == NOT_REPRODUCED
    assert n * medians[None, "split"] / medians[None, "n1"] == pytest.approx(1, abs=0.05)
    assert verdict_of("ps.scale.all", rows(None), GPUS) == REPRODUCED
    # The same samples without a spread: one timing against the bound, which judges nothing.
    for calls in (1, None):
        unspread = judged("ps.scale.all", rows(calls, spread=0.0), GPUS)
        assert unspread["verdict"] == INCONCLUSIVE
        assert unspread["reason"].startswith(NO_SPREAD)


def _amortized_on_gpu(rank, store, out):
    fake_cuda.install_for_good(1)  # without CUDA (NCCL on gloo)
    cuda = torch.device("cuda", 0)
    torch.cuda.set_device(cuda)
    dist.init_process_group(
        "nccl", init_method=f"file://{store}", rank=0, world_size=1, device_id=cuda
    )
    grad = torch.zeros(256, device=cuda)

    def update():  # one kernel on 1 KB: its launch and the wait for it are all it costs
        grad.add_(1.0)

    calls = parameter_server.calls_per_sample(update, cuda)
    single = statistics.median(parameter_server.timed(update, cuda, 9))
    amortized = statistics.median(parameter_server.timed(update, cuda, 9, calls))
    torch.save({"calls": calls, "single": single, "amortized": amortized}, out)
    dist.destroy_process_group()


@pytest.mark.cuda
def test_on_a_gpu_back_to_back_calls_shed_the_launch_and_the_wait(tmp_path):
    out = tmp_path / "timed"
    mp.spawn(_amortized_on_gpu, args=(tmp_path / "store", out), nprocs=1)
    got = torch.load(out)
    assert got["calls"] > 1, got  # a 1 KB kernel takes far less than a sample
    fake_cuda.real_gpu("shedding the launch and the wait")
    # Back to back, launches overlap the kernels before them and one wait serves them all.
    assert got["amortized"] < got["single"] / 2, got


def launch(tmp_path, max_devices):
    out = tmp_path / "parameter_server.csv"
    spec = {"mb": 1, "repeats": 2, "max_devices": max_devices}
    parameter_server.launch(spec, out, timeout=60, log_path=tmp_path / "ps.log")
    return pd.read_csv(out).set_index("metric")


@pytest.fixture
def three_cores(monkeypatch, cpu_only):
    """A machine of 3 CPU devices, whatever this one has: on 2 cores, a third worker shares a
    core."""
    monkeypatch.setattr(devices, "usable_cores", lambda: 3)


def test_a_launch_on_2_workers_and_on_all_devices(tmp_path, three_cores):
    rows = launch(tmp_path, max_devices=8)
    assert rows.loc["ps.workers", "value"] == 2 and rows.loc["ps.all.workers", "value"] == 3
    measured = rows[rows["status"].isna()]
    assert measured.index.str.startswith("ps.all.ring").any()
    assert set(rows.index) == {
        r["metric"] for p in ("ps", "ps.all") for r in parameter_server.unmeasured_rows("x", p)
    }
    assert not list(tmp_path.glob("parameter_server.*.csv"))  # the parts are gone


def test_no_run_on_all_devices_where_they_are_2(tmp_path, three_cores):
    rows = launch(tmp_path, max_devices=2)
    assert rows.loc["ps.workers", "value"] == 2
    gone = rows.loc[rows.index.str.startswith("ps.all.")]
    assert (gone["status"] == "not applicable").all()
    assert gone["note"].iloc[0].endswith("(parameter_server.max_devices is 2)")


def test_the_workers_have_a_command_line_of_their_own():
    """The launch starts this module as each worker, which must be told what to measure."""
    spec = {"mb": 1, "repeats": 2, "prefix": "ps", "out": "ps.csv"}
    assert parameter_server.parse_args(["--param-server", json.dumps(spec)]).param_server == spec
    with pytest.raises(SystemExit):
        parameter_server.parse_args(["--timeout", "5"])
    argv = launcher.command(parameter_server, 2, ["--timeout", "5"])
    assert argv[-4:] == ["-m", "d2lrepro.multidevice.parameter_server", "--timeout", "5"]


def _whole_to_each(grad, servers, rank, received, group=None):
    """Servers that ignore the split: every worker sends its whole gradient to each."""
    whole = {w: torch.empty_like(grad) for w in received}
    ops = [dist.P2POp(dist.irecv, buffer, w, group) for w, buffer in whole.items()]
    ops += [dist.P2POp(dist.isend, grad, s, group) for s in range(servers) if s != rank]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _chunked_ring(grad):
    """The all-reduce sent in 4 KB messages: latency-bound."""
    for chunk in grad.split(1024):
        dist.all_reduce(chunk)


def _timed(rank, world, store, out, mb, mutation):
    torch.set_num_threads(1)
    devices.pin_to_core(rank)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    if mutation == "chunked":
        parameter_server.ring = _chunked_ring
    elif mutation == "gathered":  # "split over all workers", done on one
        parameter_server.ring = lambda grad: parameter_server.gather(
            grad, parameter_server.inbox(grad, 1, rank, world), rank
        )
    elif mutation == "whole":
        parameter_server.push = _whole_to_each
    rows = parameter_server.measure(mb, 7, torch.device("cpu"))
    if rank == 0:
        torch.save(rows, out)
    dist.destroy_process_group()


def timed_rows(tmp_path, mutation="", mb=16):
    store, out = tmp_path / f"store{mutation}", tmp_path / f"rows{mutation}"
    mp.spawn(_timed, args=(2, store, out, mb, mutation), nprocs=2)
    return torch.load(out, weights_only=False)


GPUS = {"cuda_devices": 4, "usable_cores": 4}


@pytest.mark.parametrize("claim_id", ["ps.sync160.all", "ps.scale.all"])
def test_the_claims_on_all_the_devices_need_more_than_the_2_worker_run(claim_id):
    """On 2 GPUs the run on all the devices is the 2-worker run: its claims need a third."""
    rows = [
        results.metric(m, 0.01) for c in shipped_claims()[claim_id]["checks"] for m in metrics_of(c)
    ]
    two = {"cuda_devices": 2, "usable_cores": 2}
    assert verdict_of(claim_id, rows, two) == NOT_APPLICABLE
    assert verdict_of(claim_id, rows, GPUS) != NOT_APPLICABLE


def test_o_m_over_n_is_judged_on_gpus_only():
    def pushes(prefix, split_x_n, n1=1.0, iqr=0.02):
        return [
            results.metric(f"{prefix}.push.{name}.{stat}_s", value)
            for name, median in (("split_x_n", split_x_n), ("n1", n1))
            for stat, value in (("median", median), ("iqr", iqr))
        ]

    for claim, prefix in (("ps.scale", "ps"), ("ps.scale.all", "ps.all")):
        assert verdict_of(claim, pushes(prefix, 1.2), GPUS) == REPRODUCED
        assert verdict_of(claim, pushes(prefix, 2.0), GPUS) == NOT_REPRODUCED  # O(m), not O(m/n)
        # CPU processes: what they measure is an observation of this machine, either way.
        assert verdict_of(claim, pushes(prefix, 1.2)) == OBSERVED
        assert verdict_of(claim, pushes(prefix, 2.0)) == OBSERVED


def test_servers_that_ignore_the_split_fail_o_m_over_n(tmp_path):
    # Each server receives a whole gradient: 2 × the split push is twice the one-server push.
    # The claim needs GPUs (over loopback each CPU process copies as many bytes in the split
    # push as the one server does): these CPU numbers stand in for theirs.
    assert verdict_of("ps.scale", timed_rows(tmp_path, "whole"), GPUS) == NOT_REPRODUCED


def test_a_ring_that_gathers_on_one_worker_fails_the_split_work(tmp_path):
    # The claim needs GPUs (2 CPU processes copy 2 gradients each in either strategy): these
    # CPU numbers stand in for theirs.
    rows = timed_rows(tmp_path, "gathered")
    assert verdict_of("ps.sync160", rows, GPUS) in (NOT_REPRODUCED, INCONCLUSIVE)
    # Measured by CPU processes, it is an observation of this machine, not of the book.
    assert verdict_of("ps.sync160", rows) == OBSERVED


def test_a_latency_bound_ring_is_no_faster_than_ethernet(tmp_path):
    # The claim needs GPUs; these CPU numbers stand in for theirs. Its bound (12 GB/s, PCIe
    # 3.0 x16 as the book's table says it is achieved) is far above what even the unbroken
    # ring of 2 gloo processes reaches here (near 1 GB/s), so this fails either way: the
    # bound's two sides are tested in test_ring_bandwidth_against_ethernet_and_pcie.
    assert verdict_of("ps.bw", timed_rows(tmp_path, "chunked", mb=1), GPUS) == NOT_REPRODUCED


def test_ring_bandwidth_against_ethernet_and_pcie():
    def ring(gbps, iqr=0.1):
        return [
            results.metric("ps.ring.busbw_gbps", gbps),
            results.metric("ps.ring.busbw_iqr_gbps", iqr),
        ]

    gpus = {"cuda_devices": 2, "usable_cores": 2}
    # The bound: the fastest Ethernet the book names, 100 GbE at about 10 GB/s.
    assert verdict_of("ps.bw", ring(12), gpus) == REPRODUCED  # PCIe 3.0 x16 as the book's table
    assert verdict_of("ps.bw", ring(9.5), gpus) == NOT_REPRODUCED  # 100 GbE would do
    assert verdict_of("ps.bw", ring(1.5), gpus) == NOT_REPRODUCED  # 10 GbE nearly would
    assert verdict_of("ps.bw", ring(10.04), gpus) == INCONCLUSIVE  # within the spread
    assert verdict_of("ps.bw", ring(13)) == OBSERVED  # CPU processes: no GPU link

    def nvlink(gbps, iqr, linked=True):
        prefix = "ps.ring_nvlink"
        if not linked:
            return parameter_server.bandwidth_rows(prefix, [], "", "no NVLink between GPU 0 and 1")
        return parameter_server.bandwidth_rows(prefix, [gbps - iqr / 2, gbps, gbps + iqr / 2], "")

    assert verdict_of("ps.nvlink", nvlink(54, 2), gpus) == REPRODUCED  # the book's NVLink ring
    assert verdict_of("ps.nvlink", nvlink(25, 1), gpus) == NOT_REPRODUCED  # fewer NVLinks
    assert verdict_of("ps.nvlink", nvlink(33, 4), gpus) == INCONCLUSIVE  # within the spread
    assert verdict_of("ps.nvlink", nvlink(25, 1, linked=False), gpus) == NOT_APPLICABLE  # PCIe
    assert verdict_of("ps.nvlink", nvlink(54, 2)) == OBSERVED  # no GPUs: CPU processes


def test_the_summary_draws_the_figure_naming_the_machine_that_measured(tmp_path, footers):
    timings = tmp_path / "metrics.csv"
    rows = parameter_server.unmeasured_rows("needs 2 devices")
    results.write_metrics([r | {"machine": "m2"} for r in rows], timings)
    parameter_server.summarize(timings, {"m2": machine_record("node2", 2)}, tmp_path / "ps.png")
    assert "node2" in footers["ps"]
