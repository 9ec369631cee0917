"""Mutation tests of the claims only a GPU can measure: the code a claim is about, broken in a
small plausible way, must turn the claim "not reproduced" where the same call unbroken reads
"reproduced". On this machine's CUDA where it has one; elsewhere under the fake CUDA of
fake_cuda.py at tiny sizes, where the unbroken and the broken code run and measure, and the
verdicts, which need a GPU's numbers, are skipped."""

import time

import pytest
import torch
import yaml

from conftest import REPO, assert_not_reproduced, skip_unless_reproduced, this_machine
from d2lrepro.core import devices
from d2lrepro.performance import asynchrony, autopar, hardware
from fake_cuda import GPUS, REAL, real_gpu, sized

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cuda")]
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA devices, this machine has {GPUS}")
HERE = this_machine()
ASYNC = yaml.safe_load((REPO / "config.yaml").read_text())["asynchrony"]
BOOK_ASYNC = {
    "size": sized(ASYNC["size"], 32),
    "steps": sized(ASYNC["steps"], 3),
    "repeats": sized(ASYNC["repeats"], 1),
}
COPIES = {"size": sized(1000, 32), "n": sized(50, 2), "max_run_time": sized(2.0, 0.05)}


def unbroken(claim_id: str, rows: list[dict]) -> None:
    """On a GPU, skip unless the unbroken code reproduces ``claim_id`` (only then can a
    mutation show something); under the fake CUDA, its rows must be measured numbers."""
    if REAL:
        skip_unless_reproduced(claim_id, rows, HERE)
    else:
        assert all(not row["status"] for row in rows), rows


def broken(claim_id: str, rows: list[dict]) -> None:
    """The mutated code's numbers must fail ``claim_id``; under the fake CUDA they must be
    measured, and the verdict is skipped."""
    if not REAL:
        assert all(not row["status"] for row in rows), rows
        real_gpu(f"the verdict on {claim_id}")
    assert_not_reproduced(claim_id, rows, HERE)


@pytest.fixture(scope="module")
def book_asynchrony(cuda):
    """The unbroken benchmark at the book's size: the 100× of async.warmup+bench depends on it
    (numpy's time grows with size³, the unsynchronized GPU loop only queues 20 launches)."""
    return asynchrony.asynchrony(**BOOK_ASYNC)


def test_a_torch_loop_left_on_the_host_is_no_faster_than_numpy(book_asynchrony, monkeypatch):
    """async.warmup+bench. Mutation: the loop's matrices made without their device, so torch
    computes on the host CPU as numpy does (float32 against float64: a few times faster at
    most, not 100)."""
    unbroken("async.warmup+bench", book_asynchrony)
    real = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *size, device=None, **kw: real(*size, **kw))
    broken("async.warmup+bench", asynchrony.asynchrony(**BOOK_ASYNC))


def test_products_that_wait_for_the_gpu_leave_nothing_to_synchronize(book_asynchrony, monkeypatch):
    """async.sync. Mutation: each product waits for the GPU before it returns, so Python never
    runs ahead of the GPU: the loop takes as long without the final synchronize as with it (a
    ratio about 1, the bound 0.5)."""
    unbroken("async.sync", book_asynchrony)
    real = torch.mm

    def blocking(a, b):
        product = real(a, b)
        devices.synchronize(product.device)
        return product

    monkeypatch.setattr(torch, "mm", blocking)
    broken("async.sync", asynchrony.asynchrony(**BOOK_ASYNC))


def test_copies_that_wait_for_the_gpu_hold_one_buffer_at_a_time(monkeypatch):
    """async.memory at the book's size. Mutation: each copy to the host waits for the GPU
    before it returns, so Python never queues a copy while another is in flight: the loop
    that is never synchronized has one copy in flight at a time, as the synchronized one
    does (a ratio of 1)."""

    def measure():
        return asynchrony.queue_memory(BOOK_ASYNC["size"], BOOK_ASYNC["steps"])

    unbroken("async.memory", measure())
    real = torch.Tensor.to

    def waiting(self, *args, **kw):
        copy = real(self, *args, **kw)
        devices.synchronize(self.device)
        return copy

    monkeypatch.setattr(torch.Tensor, "to", waiting)
    broken("async.memory", measure())


@two_gpus
def test_a_chain_left_on_the_host_is_no_match_for_the_other_gpu(monkeypatch):
    """autopar.single at 1000² rather than the book's 4000² (the mutated chain runs on the CPU,
    where 50 products of 4000² take tens of seconds): two equal GPUs time alike at any size
    whose products outweigh their launches (some 70 µs against 5 on an H100). Mutation: GPU
    1's matrix made on the host, so chain b runs on the CPU, tens of times slower than a."""

    def measure():
        return autopar.autopar_gpus(
            size=sized(1000, 32), n=sized(50, 2), max_run_time=sized(2.0, 0.05)
        )

    unbroken("autopar.single", measure())
    real, gpu1 = torch.rand, torch.device("cuda", 1)

    def rand(*size, device=None, **kw):
        return real(*size, device="cpu" if device == gpu1 else device, **kw)

    monkeypatch.setattr(torch, "rand", rand)
    broken("autopar.single", measure())


@pytest.fixture(scope="module")
def copies(cuda):
    """copy_overlap unbroken at 1000² rather than the book's 4000²: a side stream hides most of
    the shorter of computing and copying at any size where a product and a copy (some 70 and
    80 µs on an H100) outweigh the launches and waits of a step (about 10 µs)."""
    return autopar.copy_overlap(**COPIES)


def test_results_left_on_the_gpu_cost_nothing_to_copy(copies, monkeypatch):
    """autopar.copy. Mutation: the results "copied" to the device they are on (``.to(device)``
    for ``.to("cpu")``), which hands them back as they are: nothing crosses the bus, so the
    copy no longer takes longer than computing."""
    unbroken("autopar.copy", copies)
    real = torch.Tensor.to

    def to(self, *args, **kw):
        if args and isinstance(args[0], str) and args[0] == "cpu":
            args = (self.device, *args[1:])
        return real(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "to", to)
    broken("autopar.copy", autopar.copy_overlap(**COPIES))


def test_blocking_copies_leave_nothing_to_overlap(copies, monkeypatch):
    """autopar.overlap.stream. Mutation: the side stream's copies made blocking
    (``non_blocking`` lost), so the host waits for each product and its copy before it queues
    the next product: compute and copies run one after the other, plus a launch between them,
    and hide none of the shorter of computing and copying into pinned memory."""
    unbroken("autopar.overlap.stream", copies)
    real = torch.Tensor.copy_
    monkeypatch.setattr(
        torch.Tensor, "copy_", lambda self, src, non_blocking=False: real(self, src)
    )
    broken("autopar.overlap.stream", autopar.copy_overlap(**COPIES))


def test_pieces_read_in_mib_copy_as_fast_as_the_whole(monkeypatch):
    """hw.transfers.gpu at the book's 16 MiB in 4 KiB pieces. Mutation: the pieces' size read in
    MiB, so "many" is four 4 MiB copies queued back to back, whose launches hide behind the
    transfers: as fast as one copy of the whole, not 1.5 times slower."""

    def measure():
        return hardware.transfer_cost(
            torch.device("cuda", 0),
            total_mib=sized(16, 1),
            chunk_kib=4,
            max_run_time=sized(2.0, 0.1),
        )

    unbroken("hw.transfers.gpu", measure())
    monkeypatch.setattr(hardware, "KIB", hardware.MIB)
    broken("hw.transfers.gpu", measure())


def launch_rows() -> list[dict]:
    """launch.cuda.us and its IQR as hardware.overheads writes them: hardware.launch_seconds
    on the first GPU."""
    device = torch.device("cuda", 0)
    names = ("launch.cuda.us", "launch.cuda.iqr_us")
    return hardware.microseconds(names, hardware.launch_seconds(device), device)


def test_a_queue_timed_whole_is_no_launch(monkeypatch):
    """hw.launch (3.16 to 31.6 µs per launch). Mutation: launch_seconds with the division by the
    launches left out, so it reports a whole queue of 1000 in-place adds, not the time of one
    launch: at least a millisecond on any GPU, so it fails whether or not the unbroken launch
    reproduces here."""

    def queue_seconds(device, launches=1000, queues=10):
        x = torch.zeros(1, device=device)
        times = []
        for _ in range(queues + 1):
            hardware.synchronize(device)
            start = time.perf_counter()
            for _ in range(launches):
                x.add_(1)
            hardware.synchronize(device)
            times.append(time.perf_counter() - start)  # / launches left out
        return times[1:]

    monkeypatch.setattr(hardware, "launch_seconds", queue_seconds)
    broken("hw.launch", launch_rows())
