"""Computational performance (d2l chapter 13): compilers and interpreters, asynchronous
computation, automatic parallelism, and the hardware underneath.

Each measurement returns metric rows (results.metric); names are dot-separated paths, times
are in seconds, and an experiment that cannot run here yields the same names with NaN and the
reason in ``note``:

- ``imperative.result``, ``symbolic.result``: fancy_func(1, 2, 3, 4) both ways (book: 10).
- ``hyb.n_calls``; ``hyb.batch{B}.{mode}.{median_s,iqr_s,runs}`` (timing helper, time of
  ``n_calls`` forward calls), ``hyb.batch{B}.{mode}.naive_s`` (the book's one cold loop),
  ``hyb.batch{B}.{mode}.max_abs_diff`` (against eager), ``hyb.batch{B}.eager_over_{mode}``
  (eager median / mode median), for mode in eager, script, compile.
- ``serial.file_bytes``, ``serial.params``, ``serial.max_abs_diff``.
- ``async.numpy_s``; ``async.{cpu,cuda}.{nosync_s,sync_s,nosync_over_sync,z0,z1}``;
  ``async.memory.{nosync,sync}_peak_bytes``.
- ``autopar.{cpu,streams,gpus}.{a,b,both}.{median_s,iqr_s,runs}``, ``autopar.{v}.sum_s`` (a + b),
  ``autopar.{v}.both_below_sum`` (1 or 0), ``autopar.{v}.speedup`` (sum / both);
  ``autopar.gpus.book_both_s`` (the book's code, which synchronizes only the current device).
- ``copy.{compute,copy,overlap,book}.{median_s,iqr_s,runs}``, ``copy.sum_s`` (compute + copy),
  ``copy.{overlap,book}_below_sum`` (1 or 0).
- ``bandwidth.{h2d,d2h}.{pinned,pageable}.mib{N}.gbps``.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import re
import statistics
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils import benchmark

from . import environment, plotting
from .environment import synchronize
from .results import metric, not_applicable

KIB, MIB = 1024, 1024**2
MODES = ("eager", "script", "compile")
BOOK_PARAMS = 164_482
NAN_TIMING = {"median": math.nan, "iqr": math.nan, "runs": math.nan}
CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")


# Timing ---------------------------------------------------------------------------------------

def _drain() -> None:
    # Work queued before a clock starts must not be charged to it.
    if torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


def time_fn(fn: Callable, device, min_run_time: float = 0.2, max_run_time: float = 10.0) -> dict:
    """Seconds per call of ``fn``: median and IQR over ``runs`` timed blocks, after warm-up.

    torch.utils.benchmark picks the block size and warms up; its clock waits for ``device``
    (Timer's default clock waits for the current accelerator, which need not be ``device``),
    and the thread count is torch's current one (Timer's own default is 1).
    """
    def clock():
        synchronize(device)
        return time.perf_counter()

    timer = benchmark.Timer("fn()", globals={"fn": fn}, timer=clock, num_threads=torch.get_num_threads())
    m = timer.adaptive_autorange(min_run_time=min_run_time, max_run_time=max_run_time)
    return {"median": m.median, "iqr": m.iqr, "runs": len(m.times)}


def naive_time(fn: Callable, device, sync: bool) -> float:
    """The book's d2l.Benchmark: wall-clock seconds of one call, no warm-up; with ``sync``
    the clock stops only once ``device`` has finished."""
    _drain()
    start = time.perf_counter()
    fn()
    if sync:
        synchronize(device)
    return time.perf_counter() - start


@contextlib.contextmanager
def intra_op_threads(n: int | None):
    """torch's intra-op thread count set to ``n`` (None: left as it is), restored afterwards."""
    threads = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _timing_rows(name: str, timing: dict, device: str, note: str = "") -> list[dict]:
    return [metric(f"{name}.median_s", timing["median"], "s", device, note),
            metric(f"{name}.iqr_s", timing["iqr"], "s", device, note),
            metric(f"{name}.runs", timing["runs"], "", device, note)]


def _unmeasured(rows: list[dict], reason: str) -> list[dict]:
    """The same metrics as ``rows``, not measured, for ``reason``."""
    return [not_applicable(row["metric"], reason, row["unit"]) for row in rows]


def _one_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


# What runs on this hardware -------------------------------------------------------------------

class Applicability(NamedTuple):
    runs: bool
    reason: str  # empty when it runs


CUDA_NEEDED = {"async_cuda": 1, "memory_cuda": 1, "autopar_2gpu": 2, "autopar_streams": 1,
               "copy_overlap": 1, "bandwidth": 1}


def applicability(cuda_devices: int) -> dict[str, Applicability]:
    """For each CUDA experiment, whether it runs with ``cuda_devices`` devices, and if not, why."""
    def reason(need):
        if cuda_devices >= need:
            return ""
        return "needs CUDA" if need == 1 else f"needs {need} CUDA devices, this machine has {cuda_devices}"

    return {name: Applicability(not reason(need), reason(need)) for name, need in CUDA_NEEDED.items()}


def _reason(experiment: str, cuda_devices: int | None) -> str:
    count = environment.cuda_devices() if cuda_devices is None else cuda_devices
    return applicability(count)[experiment].reason


# Imperative and symbolic programming ----------------------------------------------------------

def add(a, b):
    return a + b


def fancy_func(a, b, c, d):
    e = add(a, b)
    f = add(c, d)
    g = add(e, f)
    return g


def add_():
    return '''
def add(a, b):
    return a + b
'''


def fancy_func_():
    return '''
def fancy_func(a, b, c, d):
    e = add(a, b)
    f = add(c, d)
    g = add(e, f)
    return g
'''


def evoke_():
    return add_() + fancy_func_() + 'print(fancy_func(1, 2, 3, 4))'


def imperative_vs_symbolic() -> tuple[list[dict], str]:
    """fancy_func(1, 2, 3, 4) called, and as the book's generated program compiled and executed;
    returns the rows and the program."""
    program = evoke_()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(program, "", "exec"), {})
    rows = [metric("imperative.result", fancy_func(1, 2, 3, 4)),
            metric("symbolic.result", float(printed.getvalue()))]
    return rows, program


# Hybridization and serialization --------------------------------------------------------------

def get_net(seed: int = 0) -> nn.Sequential:
    """The book's MLP (164,482 parameters), initialized from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 2))


@contextlib.contextmanager
def _quiet_jit():
    # torch.jit warns that it is deprecated; TorchScript is what the book's section measures.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def convert(net: nn.Module, mode: str) -> Callable:
    """``net`` as run in ``mode``: eager (itself), script (TorchScript) or compile (torch.compile,
    specialized to each input shape; it compiles lazily, on the first call)."""
    if mode == "eager":
        return net
    if mode == "script":
        with _quiet_jit():
            return torch.jit.script(net)
    if mode == "compile":
        return torch.compile(net, dynamic=False)
    raise ValueError(f"unknown mode {mode!r}")


def _hyb_rows(prefix: str, naive: float, timing: dict, diff: float, device: str) -> list[dict]:
    return [metric(f"{prefix}.naive_s", naive, "s", device), *_timing_rows(prefix, timing, device),
            metric(f"{prefix}.max_abs_diff", diff, "", device)]


def hybridize(batch_sizes=(1, 64, 1024), modes=MODES, n_calls: int = 1000, device="cpu", seed: int = 0,
              min_run_time: float = 0.2, max_run_time: float = 10.0) -> list[dict]:
    """Forward passes of the book's MLP run eagerly, by TorchScript and by torch.compile.

    Autograd stays on, as in the book (it calls net(x) without torch.no_grad). For each batch
    size, in the book's order of modes: naive_s is the book's loop of ``n_calls`` calls on a
    shape the net has not seen, so it includes TorchScript's profiling runs and torch.compile's
    compilation (on CUDA it also waits for the device at the end, unlike the book); median_s
    and iqr_s are the timing helper's per-call figures times ``n_calls``, its blocks of calls
    standing for the book's loop; max_abs_diff compares the output with eager's. A mode that
    raises (torch.compile without a working C++ toolchain, say) is not applicable with the
    error's first line.
    """
    device = torch.device(device)
    eager = get_net(seed).to(device)
    nets = {}
    # Every mode gets its rows; one this run leaves out is not applicable, with that reason.
    failed = {mode: "not run: not among the configured modes" for mode in MODES if mode not in modes}
    for mode in MODES:
        if mode in failed:
            continue
        try:
            nets[mode] = convert(eager, mode)
        except Exception as error:  # noqa: BLE001 -- a failure to convert is a result
            failed[mode] = _one_line(error)

    rows = [metric("hyb.n_calls", n_calls)]
    for batch in batch_sizes:
        x = torch.randn(batch, 512, device=device)
        reference = eager(x).detach()
        medians = {}
        for mode in MODES:
            prefix = f"hyb.batch{batch}.{mode}"
            if mode not in failed:
                try:
                    naive, timing, diff = _measure_net(nets[mode], x, reference, n_calls, device,
                                                       min_run_time, max_run_time)
                except Exception as error:  # noqa: BLE001 -- torch.compile fails on its first call
                    failed[mode] = _one_line(error)
            if mode in failed:
                rows += _unmeasured(_hyb_rows(prefix, math.nan, NAN_TIMING, math.nan, ""), failed[mode])
                continue
            medians[mode] = timing["median"]
            rows += _hyb_rows(prefix, naive, timing, diff, str(device))
        for mode in MODES[1:]:  # eager is the reference
            name = f"hyb.batch{batch}.eager_over_{mode}"
            rows.append(metric(name, medians["eager"] / medians[mode], "x", str(device))
                        if "eager" in medians and mode in medians
                        else not_applicable(name, failed.get(mode) or failed["eager"], "x"))
    return rows


def _measure_net(net, x, reference, n_calls, device, min_run_time, max_run_time) -> tuple[float, dict, float]:
    """The book's cold loop, the timing helper's estimate for ``n_calls`` calls, and the largest
    difference from ``reference``."""
    def loop():
        for _ in range(n_calls):
            net(x)

    naive = naive_time(loop, device, sync=True)
    diff = (net(x) - reference).abs().max().item()
    per_call = time_fn(lambda: net(x), device, min_run_time, max_run_time)
    timing = {"median": per_call["median"] * n_calls, "iqr": per_call["iqr"] * n_calls, "runs": per_call["runs"]}
    return naive, timing, diff


def serialize(directory, seed: int = 0) -> list[dict]:
    """The book's net.save('my_mlp'): save the scripted MLP, load it back, compare outputs."""
    path = Path(directory) / "my_mlp"
    path.parent.mkdir(parents=True, exist_ok=True)
    net = convert(get_net(seed), "script")
    with _quiet_jit():
        torch.jit.save(net, str(path))
        loaded = torch.jit.load(str(path))
    x = torch.randn(1, 512)
    return [metric("serial.file_bytes", path.stat().st_size, "B"),
            metric("serial.params", sum(p.numel() for p in net.parameters())),
            metric("serial.max_abs_diff", (loaded(x) - net(x)).abs().max().item())]


# Asynchronous computation ---------------------------------------------------------------------

ASYNC_UNITS = {"nosync_s": "s", "sync_s": "s", "nosync_over_sync": "x", "z0": "", "z1": ""}


def _torch_async(device: torch.device, size: int, steps: int, repeats: int) -> dict[str, float]:
    def loop():
        for _ in range(steps):
            a = torch.randn(size, size, device=device)
            torch.mm(a, a)

    loop()  # the book's warm-up
    # Alternated, so that both see the same load from whatever else runs on the machine.
    runs = [(naive_time(loop, device, False), naive_time(loop, device, True)) for _ in range(repeats)]
    nosync, sync = (statistics.median(times) for times in zip(*runs))
    x = torch.ones((1, 2), device=device)
    y = torch.ones((1, 2), device=device)
    z = (x * y + 2).cpu()
    return {"nosync_s": nosync, "sync_s": sync, "nosync_over_sync": nosync / sync,
            "z0": z[0, 0].item(), "z1": z[0, 1].item()}


def asynchrony(size: int = 1000, steps: int = 10, repeats: int = 3, cuda_devices: int | None = None,
               seed: int = 0) -> list[dict]:
    """The book's numpy vs torch benchmark: ``steps`` times a ``size``² normal matrix and its
    square, on the CPU with numpy, then with torch on the CPU and on CUDA, each the median of
    ``repeats`` book-style single runs without and with synchronization, plus z = x * y + 2.

    On the CPU torch ops return when done, so nosync_over_sync is about 1; on CUDA they return
    once queued, the book's illusion of speed."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def numpy_loop():
        for _ in range(steps):
            a = rng.normal(size=(size, size))
            np.dot(a, a)

    numpy_s = statistics.median(naive_time(numpy_loop, "cpu", False) for _ in range(repeats))
    rows = [metric("async.numpy_s", numpy_s, "s", "cpu")]
    rows += [metric(f"async.cpu.{k}", v, ASYNC_UNITS[k], "cpu")
             for k, v in _torch_async(torch.device("cpu"), size, steps, repeats).items()]
    reason = _reason("async_cuda", cuda_devices)
    if reason:
        return rows + [not_applicable(f"async.cuda.{k}", reason, unit) for k, unit in ASYNC_UNITS.items()]
    cuda = torch.device("cuda", 0)
    return rows + [metric(f"async.cuda.{k}", v, ASYNC_UNITS[k], str(cuda))
                   for k, v in _torch_async(cuda, size, steps, repeats).items()]


def queue_memory(size: int = 4096, steps: int = 100, cuda_devices: int | None = None) -> list[dict]:
    """Peak CUDA memory of ``steps`` rounds of fresh ``size``² tensors, a product and a ReLU,
    queued without waiting versus synchronized every step (the book's warning that an
    unchecked queue can use too much memory)."""
    names = ("async.memory.nosync_peak_bytes", "async.memory.sync_peak_bytes")
    reason = _reason("memory_cuda", cuda_devices)
    if reason:
        return [not_applicable(name, reason, "B") for name in names]
    device = torch.device("cuda", 0)
    rows = []
    for name, sync_each in zip(names, (False, True)):
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        for _ in range(steps):
            x = torch.randn(size, size, device=device)
            out = x @ x
            out.relu()
            if sync_each:
                synchronize(device)
        synchronize(device)
        rows.append(metric(name, torch.cuda.max_memory_allocated(device), "B", str(device)))
    return rows


# Automatic parallelism ------------------------------------------------------------------------

def run(x: torch.Tensor, n: int = 50) -> list[torch.Tensor]:
    """The book's workload: ``n`` products x @ x, all kept."""
    return [x.mm(x) for _ in range(n)]


def _parallel_rows(prefix: str, times: dict[str, dict], device: str, note: str) -> list[dict]:
    rows = [r for part in ("a", "b", "both") for r in _timing_rows(f"{prefix}.{part}", times[part], device, note)]
    total, both = times["a"]["median"] + times["b"]["median"], times["both"]["median"]
    return rows + [metric(f"{prefix}.sum_s", total, "s", device, note),
                   metric(f"{prefix}.both_below_sum", float(both < total), "", device, note),
                   metric(f"{prefix}.speedup", total / both, "x", device, note)]


def _parallel_unmeasured(prefix: str, reason: str) -> list[dict]:
    return _unmeasured(_parallel_rows(prefix, dict.fromkeys(("a", "b", "both"), NAN_TIMING), "", ""), reason)


def autopar_cpu(size: int = 4000, n: int = 50, seed: int = 0, min_run_time: float = 0.2,
                max_run_time: float = 10.0) -> list[dict]:
    """The CPU analogue of the book's two-GPU experiment: chains a and b of run() alone, each on
    one intra-op thread, and both at once in two Python threads (mm releases the GIL)."""
    torch.manual_seed(seed)
    xa, xb = torch.rand(size, size), torch.rand(size, size)
    with intra_op_threads(1), ThreadPoolExecutor(2) as pool:
        def both():
            for future in [pool.submit(run, xa, n), pool.submit(run, xb, n)]:
                future.result()

        times = {"a": time_fn(lambda: run(xa, n), "cpu", min_run_time, max_run_time),
                 "b": time_fn(lambda: run(xb, n), "cpu", min_run_time, max_run_time),
                 "both": time_fn(both, "cpu", min_run_time, max_run_time)}
    return _parallel_rows("autopar.cpu", times, "cpu", "two chains, one thread each")


def autopar_streams(size: int = 4000, n: int = 50, seed: int = 0, cuda_devices: int | None = None,
                    min_run_time: float = 0.2, max_run_time: float = 10.0) -> list[dict]:
    """On one GPU: chains a and b of run() each on its own CUDA stream, alone and both at once."""
    reason = _reason("autopar_streams", cuda_devices)
    if reason:
        return _parallel_unmeasured("autopar.streams", reason)
    device = torch.device("cuda", 0)
    torch.manual_seed(seed)
    xa, xb = torch.rand(size, size, device=device), torch.rand(size, size, device=device)
    streams = torch.cuda.Stream(device), torch.cuda.Stream(device)
    synchronize(device)  # the inputs, made on the default stream, are ready before the side streams read them

    def chains(*which):
        for i in which:
            with torch.cuda.stream(streams[i]):
                run((xa, xb)[i], n)
        synchronize(device)

    times = {"a": time_fn(lambda: chains(0), device, min_run_time, max_run_time),
             "b": time_fn(lambda: chains(1), device, min_run_time, max_run_time),
             "both": time_fn(lambda: chains(0, 1), device, min_run_time, max_run_time)}
    return _parallel_rows("autopar.streams", times, str(device), "two CUDA streams on one GPU")


def autopar_gpus(size: int = 4000, n: int = 50, seed: int = 0, cuda_devices: int | None = None,
                 min_run_time: float = 0.2, max_run_time: float = 10.0) -> list[dict]:
    """The book's experiment: run() on GPU 0 alone, on GPU 1 alone, and on both, waiting for both
    GPUs; book_both_s is the book's own code, which waits only for the current device."""
    reason = _reason("autopar_2gpu", cuda_devices)
    if reason:
        return _parallel_unmeasured("autopar.gpus", reason) + [not_applicable("autopar.gpus.book_both_s", reason, "s")]
    devices = torch.device("cuda", 0), torch.device("cuda", 1)
    torch.manual_seed(seed)
    xs = [torch.rand(size, size, device=d) for d in devices]

    def on(*which):
        for i in which:
            run(xs[i], n)
        for i in which:
            synchronize(devices[i])

    times = {"a": time_fn(lambda: on(0), devices[0], min_run_time, max_run_time),
             "b": time_fn(lambda: on(1), devices[1], min_run_time, max_run_time),
             "both": time_fn(lambda: on(0, 1), devices[0], min_run_time, max_run_time)}
    current = torch.device("cuda", torch.cuda.current_device())
    book = naive_time(lambda: (run(xs[0], n), run(xs[1], n)), current, sync=True)
    return (_parallel_rows("autopar.gpus", times, "cuda:0+cuda:1", "two GPUs")
            + [metric("autopar.gpus.book_both_s", book, "s", "cuda:0+cuda:1", "synchronizes the current device only")])


def _copy_rows(times: dict[str, dict], device: str) -> list[dict]:
    rows = [r for part in ("compute", "copy", "overlap", "book") for r in _timing_rows(f"copy.{part}", times[part], device)]
    total = times["compute"]["median"] + times["copy"]["median"]
    return rows + [metric("copy.sum_s", total, "s", device),
                   metric("copy.overlap_below_sum", float(times["overlap"]["median"] < total), "", device),
                   metric("copy.book_below_sum", float(times["book"]["median"] < total), "", device)]


def copy_overlap(size: int = 4000, n: int = 50, seed: int = 0, cuda_devices: int | None = None,
                 min_run_time: float = 0.2, max_run_time: float = 10.0) -> list[dict]:
    """The book's 'Run on GPU1 and copy to CPU': compute alone, blocking copy of the results
    alone, each product copied on a side stream into pinned memory while the next one computes
    (overlap), and the book's code (non-blocking copies queued after all products, book)."""
    reason = _reason("copy_overlap", cuda_devices)
    if reason:
        return _unmeasured(_copy_rows(dict.fromkeys(("compute", "copy", "overlap", "book"), NAN_TIMING), ""), reason)
    device = torch.device("cuda", 0)
    torch.manual_seed(seed)
    x = torch.rand(size, size, device=device)
    ys = run(x, n)
    pinned = [torch.empty(size, size, pin_memory=True) for _ in range(n)]
    copier = torch.cuda.Stream(device)
    synchronize(device)

    def overlapped():
        for buffer in pinned:
            y = x.mm(x)
            copier.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(copier):
                buffer.copy_(y, non_blocking=True)
            y.record_stream(copier)  # keeps y's memory from reuse until the copy is done
        synchronize(device)

    def book():
        copies = [y.to("cpu", non_blocking=True) for y in run(x, n)]
        synchronize(device)
        return copies

    times = {"compute": time_fn(lambda: run(x, n), device, min_run_time, max_run_time),
             "copy": time_fn(lambda: [y.to("cpu") for y in ys], device, min_run_time, max_run_time),
             "overlap": time_fn(overlapped, device, min_run_time, max_run_time),
             "book": time_fn(book, device, min_run_time, max_run_time)}
    return _copy_rows(times, str(device))


# Hardware -------------------------------------------------------------------------------------

def bandwidth(sizes_mib=(1, 4, 16, 64, 256), cuda_devices: int | None = None, min_run_time: float = 0.1,
              max_run_time: float = 2.0) -> list[dict]:
    """Host-to-device and device-to-host copy throughput (GB = 1e9 bytes per second), from
    pinned and from pageable host memory."""
    reason = _reason("bandwidth", cuda_devices)
    device = torch.device("cuda", 0)
    rows = []
    for direction, memory, mib in itertools.product(("h2d", "d2h"), ("pinned", "pageable"), sizes_mib):
        name = f"bandwidth.{direction}.{memory}.mib{mib}.gbps"
        if reason:
            rows.append(not_applicable(name, reason, "GB/s"))
            continue
        host = torch.empty(mib * MIB, dtype=torch.uint8, pin_memory=memory == "pinned")
        gpu = torch.empty(mib * MIB, dtype=torch.uint8, device=device)
        source, target = (host, gpu) if direction == "h2d" else (gpu, host)
        timing = time_fn(lambda: target.copy_(source, non_blocking=memory == "pinned"), device,
                         min_run_time, max_run_time)
        rows.append(metric(name, mib * MIB / timing["median"] / 1e9, "GB/s", str(device)))
    return rows


def sweep_sizes(max_bytes: int, min_bytes: int = 16 * KIB) -> list[int]:
    """Powers of two from ``min_bytes`` up to ``max_bytes``."""
    return [min_bytes << i for i in range(int(math.log2(max_bytes // min_bytes)) + 1)]


def memory_sweep(max_bytes: int = 256 * MIB, min_bytes: int = 16 * KIB, devices=None, threads: int | None = 1,
                 min_run_time: float = 0.05, max_run_time: float = 1.0) -> pd.DataFrame:
    """Throughput (GB/s, 1e9 bytes) of summing a float32 array, per device and array size;
    devices default to the CPU and, where present, the first GPU. The CPU sums on ``threads``
    intra-op threads (None: torch's setting): by default one core and its own caches, which
    also spares the sweep the thread pool's stalls when another process holds a core. The
    smallest sizes measure the per-call overhead (microseconds) more than the cache."""
    if devices is None:
        devices = ["cpu"] + (["cuda:0"] if torch.cuda.is_available() else [])
    rows = []
    with intra_op_threads(threads):
        for device, size in itertools.product(devices, sweep_sizes(max_bytes, min_bytes)):
            x = torch.ones(size // 4, device=device)
            timing = time_fn(x.sum, device, min_run_time, max_run_time)
            rows.append({"device": str(device), "bytes": size, "gbps": size / timing["median"] / 1e9})
    return pd.DataFrame(rows, columns=["device", "bytes", "gbps"])


def _parse_size(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    return int(match[1]) * {"": 1, "K": KIB, "M": MIB, "G": 1024**3}[match[2]] if match else None


def cache_sizes(root: Path = CACHE_ROOT) -> dict[str, int]:
    """CPU data-cache sizes in bytes ('L1d', 'L2', 'L3'), as sysfs reports them; {} if it does not."""
    sizes = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            label = f"L{(index / 'level').read_text().strip()}" + ("d" if kind == "Data" else "")
            size = _parse_size((index / "size").read_text())
        except OSError:
            continue
        if kind != "Instruction" and size:
            sizes[label] = size
    return sizes


# Figures --------------------------------------------------------------------------------------

def _values(metrics: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """The metrics whose names match ``pattern``, its groups as columns beside ``value``."""
    parts = metrics["metric"].str.extract(pattern)
    keep = parts.notna().all(axis=1)
    return parts[keep].assign(value=metrics.loc[keep, "value"].astype(float))


def _grouped_bars(ax, table: pd.DataFrame, groups: list, bars: list) -> None:
    """Bars of ``table``'s median_s per (group, bar), grouped along x, with error bars spanning
    iqr_s and, where the table has naive_s, hollow markers for it."""
    width = 0.8 / len(bars)
    for j, bar in enumerate(bars):
        x = np.arange(len(groups)) + (j - (len(bars) - 1) / 2) * width
        rows = table.reindex([(g, bar) for g in groups])
        ax.bar(x, rows["median_s"], width, yerr=rows["iqr_s"].fillna(0) / 2, color=f"C{j}", label=bar,
               capsize=2, error_kw={"elinewidth": 0.8})
        if "naive_s" in rows:
            ax.scatter(x, rows["naive_s"], facecolors="none", edgecolors=f"C{j}", s=18, zorder=3)
    ax.set_xticks(np.arange(len(groups)))


def plot_hybridization(metrics: pd.DataFrame, path, footer: str) -> None:
    """Time of n_calls forward passes per batch size and mode: median bars with IQR error bars,
    the book's single cold loop as hollow markers."""
    table = _values(metrics, r"^hyb\.batch(?P<batch>\d+)\.(?P<mode>\w+)\.(?P<stat>median_s|iqr_s|naive_s)$")
    table["batch"] = table["batch"].astype(int)
    table = table.pivot_table(index=["batch", "mode"], columns="stat", values="value", dropna=False)
    batches = sorted(table.index.get_level_values("batch").unique())
    modes = [m for m in MODES if m in table.index.get_level_values("mode")]
    n_calls = int(metrics.loc[metrics["metric"] == "hyb.n_calls", "value"].iloc[0])

    fig, ax = plotting.figure(figsize=(5, 3))
    _grouped_bars(ax, table, batches, modes)
    ax.scatter([], [], facecolors="none", edgecolors="0.3", s=18, label="book's cold loop")
    ax.set_xticklabels(batches)
    ax.set(yscale="log", xlabel="batch size", ylabel=f"time of {n_calls} calls (s)",
           title="MLP forward: eager, TorchScript, torch.compile")
    ax.legend(fontsize=6)
    plotting.save(fig, path, footer=footer)


AUTOPAR_VARIANTS = {"cpu": "CPU, 2 threads", "streams": "1 GPU, 2 streams", "gpus": "2 GPUs"}


def plot_autopar(metrics: pd.DataFrame, path, footer: str) -> None:
    """Chain a alone, chain b alone, both at once, and a + b, for each variant measured."""
    table = _values(metrics, r"^autopar\.(?P<variant>\w+)\.(?P<part>a|b|both)\.(?P<stat>median_s|iqr_s)$")
    table = table.dropna(subset="value").pivot_table(index=["variant", "part"], columns="stat", values="value")
    sums = table.xs("a", level="part")["median_s"] + table.xs("b", level="part")["median_s"]
    table = pd.concat([table, sums.to_frame().assign(part="sum").set_index("part", append=True)])
    variants = [v for v in AUTOPAR_VARIANTS if (v, "both") in table.index]
    labels = {"a": "a alone", "b": "b alone", "both": "both", "sum": "a + b"}
    table = table.rename(index=labels, level="part")

    fig, ax = plotting.figure(figsize=(4.5, 3))
    _grouped_bars(ax, table, variants, list(labels.values()))
    ax.set_xticklabels([AUTOPAR_VARIANTS[v] for v in variants])
    ax.set(ylabel="time (s)", title="Two independent chains of products")
    ax.legend(fontsize=6)
    plotting.save(fig, path, footer=footer)


def plot_memory_sweep(sweep: pd.DataFrame, path, footer: str, caches: dict[str, int] | None = None) -> None:
    """Sum throughput against array size (log x), with dotted lines at the CPU cache sizes."""
    caches = cache_sizes() if caches is None else caches
    fig, ax = plotting.figure(figsize=(4.5, 3))
    for device, group in sweep.groupby("device", sort=False):
        ax.plot(group["bytes"], group["gbps"], "-o", markersize=3, label=device)
    for label, size in caches.items():
        ax.axvline(size, color="0.5", linestyle=":", linewidth=0.8)
        ax.text(size, 0.98, f" {label}", transform=ax.get_xaxis_transform(), va="top", fontsize=6)
    ax.set(xscale="log", xlabel="array size (bytes)", ylabel="sum throughput (GB/s)",
           title="Memory hierarchy: sum of a float32 array")
    ax.legend(fontsize=6)
    ax.grid(True)
    plotting.save(fig, path, footer=footer)


def sweep_metrics(sweep: pd.DataFrame, caches: dict[str, int]) -> list[dict]:
    """CPU throughput from cache (best array that fits in L2) against from main memory (the
    largest array, when it is larger than the last cache level)."""
    cpu = sweep[sweep["device"] == "cpu"]
    rows = []
    l2 = caches.get("L2")
    in_cache = cpu[cpu["bytes"] <= l2] if l2 else cpu.iloc[0:0]
    rows.append(metric("sweep.cache_gbps", in_cache["gbps"].max(), "GB/s") if len(in_cache)
                else not_applicable("sweep.cache_gbps", "cache sizes unknown on this machine", "GB/s"))
    last_level = max(caches.values(), default=None)
    largest = cpu.iloc[-1]
    if last_level and largest["bytes"] > last_level:
        rows.append(metric("sweep.ram_gbps", largest["gbps"], "GB/s"))
    else:
        reason = (f"the sweep stops at {largest['bytes'] // MIB} MiB, inside the {last_level // MIB} MiB last-level cache"
                  if last_level else "cache sizes unknown on this machine")
        rows.append(not_applicable("sweep.ram_gbps", reason, "GB/s"))
    return rows
