"""Automatic parallelism (``autopar.*``): two independent chains of products alone and together
(on 2 GPUs, 2 CUDA streams, or 2 CPU cores), and computing while copying results to the host.

Metrics: ``autopar.{cpu,streams,gpus}.{a,b,both}.{median_s,iqr_s,runs}``,
``autopar.{v}.sum_s`` (a + b), ``autopar.{v}.both_below_sum`` (1 or 0), ``autopar.{v}.speedup``
(sum / both); ``autopar.gpus.book_both_s``;
``copy.{compute,copy,pinned,overlap,book}.{median_s,iqr_s,runs}``, and
``copy.{overlap,book}.hidden`` with its ``_iqr`` (the share of the shorter of computing and
copying that each part which does both hides, per round: :func:`hidden`).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import torch

from d2lrepro.core import plotting, reference
from d2lrepro.core.devices import synchronize, unavailable
from d2lrepro.core.results import metric, not_applicable, unmeasured
from d2lrepro.core.timing import alternated, intra_op_threads, naive_time, spread, timing_rows


def run(x: torch.Tensor, n: int = 50) -> list[torch.Tensor]:
    """The book's workload: ``n`` products x @ x, all kept."""
    return [x.mm(x) for _ in range(n)]


def _parallel_rows(
    prefix: str, seconds: dict[str, list[float]], device: str, note: str
) -> list[dict]:
    """Each part's timing, and the speed-up (a + b) / both: its median and IQR over the rounds
    of :func:`~d2lrepro.core.timing.alternated`, each round's parts timed side by side."""
    times = {part: spread(seconds[part]) for part in ("a", "b", "both")}
    rows = [
        r for part, t in times.items() for r in timing_rows(f"{prefix}.{part}", t, device, note)
    ]
    total, both = times["a"]["median"] + times["b"]["median"], times["both"]["median"]
    speedup = spread(
        [(a + b) / ab for a, b, ab in zip(seconds["a"], seconds["b"], seconds["both"])]
    )
    return rows + [
        metric(f"{prefix}.sum_s", total, "s", device, note),
        metric(f"{prefix}.both_below_sum", float(both < total), "", device, note),
        metric(f"{prefix}.speedup", speedup["median"], "x", device, note),
        metric(f"{prefix}.speedup_iqr", speedup["iqr"], "x", device, note),
    ]


def _parallel_unmeasured(prefix: str, reason: str) -> list[dict]:
    nothing = dict.fromkeys(("a", "b", "both"), [math.nan])
    return unmeasured(_parallel_rows(prefix, nothing, "", ""), reason)


def concurrently(pool: ThreadPoolExecutor, jobs: list[tuple]) -> None:
    """Start every job, ``(function, *arguments)``, on ``pool`` at once; wait for all."""
    for future in [pool.submit(*job) for job in jobs]:
        future.result()


def autopar_cpu(
    size: int = 4000,
    n: int = 50,
    seed: int = 0,
    max_run_time: float = 10.0,
) -> list[dict]:
    """The CPU analogue of the book's two-GPU experiment: chains a and b of run() alone, each on
    one intra-op thread, and both at once in two Python threads (mm releases the GIL)."""
    torch.manual_seed(seed)
    xa, xb = torch.rand(size, size), torch.rand(size, size)
    # A new thread computes with torch's default thread count, whatever the caller set: each
    # worker sets its own, else the two chains together run four threads on two cores.
    workers = ThreadPoolExecutor(2, initializer=torch.set_num_threads, initargs=(1,))
    with intra_op_threads(1), workers as pool:
        parts = {
            "a": lambda: run(xa, n),
            "b": lambda: run(xb, n),
            "both": lambda: concurrently(pool, [(run, xa, n), (run, xb, n)]),
        }
        times = alternated(parts, "cpu", max_run_time=max_run_time)
    return _parallel_rows("autopar.cpu", times, "cpu", "two chains, one thread each")


def autopar_streams(
    size: int = 4000,
    n: int = 50,
    seed: int = 0,
    max_run_time: float = 10.0,
) -> list[dict]:
    """On one GPU: chains a and b of run() each on its own CUDA stream, alone and both at once."""
    reason = unavailable(cuda=1)
    if reason:
        return _parallel_unmeasured("autopar.streams", reason)
    device = torch.device("cuda", 0)
    torch.manual_seed(seed)
    xa, xb = torch.rand(size, size, device=device), torch.rand(size, size, device=device)
    streams = torch.cuda.Stream(device), torch.cuda.Stream(device)
    # the inputs, made on the default stream, are ready before the side streams read them
    synchronize(device)

    def chains(*which):
        for i in which:
            with torch.cuda.stream(streams[i]):
                run((xa, xb)[i], n)
        synchronize(device)

    parts = {"a": lambda: chains(0), "b": lambda: chains(1), "both": lambda: chains(0, 1)}
    times = alternated(parts, device, max_run_time=max_run_time)
    return _parallel_rows("autopar.streams", times, str(device), "two CUDA streams on one GPU")


def autopar_gpus(
    size: int = 4000,
    n: int = 50,
    seed: int = 0,
    max_run_time: float = 10.0,
) -> list[dict]:
    """The book's experiment: run() on GPU 0 alone, on GPU 1 alone, and on both, waiting for both
    GPUs; book_both_s is the book's own code, which waits only for the current device."""
    reason = unavailable(cuda=2)
    if reason:
        return _parallel_unmeasured("autopar.gpus", reason) + [
            not_applicable("autopar.gpus.book_both_s", reason, "s")
        ]
    devices = torch.device("cuda", 0), torch.device("cuda", 1)
    torch.manual_seed(seed)
    xs = [torch.rand(size, size, device=d) for d in devices]

    def on(*which):
        for i in which:
            run(xs[i], n)
        for i in which:
            synchronize(devices[i])

    # each clock waits for every GPU a part uses (on() synchronizes them), so one device will do
    parts = {"a": lambda: on(0), "b": lambda: on(1), "both": lambda: on(0, 1)}
    times = alternated(parts, devices[0], max_run_time=max_run_time)
    current = torch.device("cuda", torch.cuda.current_device())
    book = naive_time(lambda: (run(xs[0], n), run(xs[1], n)), current, sync=True)
    return _parallel_rows("autopar.gpus", times, "cuda:0+cuda:1", "two GPUs") + [
        metric(
            "autopar.gpus.book_both_s",
            book,
            "s",
            "cuda:0+cuda:1",
            "synchronizes the current device only",
        )
    ]


COPY_PARTS = ("compute", "copy", "pinned", "overlap", "book")
# The parts that compute and copy: each is judged against computing, then copying to pinned
# memory (compute + pinned), by the share of the shorter of the two that it hides.
BOTH_PARTS = ("overlap", "book")


def hidden(compute: float, pinned: float, both: float) -> float:
    """The share of the shorter of ``compute`` and ``pinned`` (seconds of computing and of
    copying alone) that ``both`` (seconds of doing the two) hides: 0 when it takes their sum,
    one after the other; 1 when it takes only the longer, the shorter hidden behind it."""
    return (compute + pinned - both) / min(compute, pinned)


def _copy_rows(seconds: dict[str, list[float]], device: str) -> list[dict]:
    times = {part: spread(seconds[part]) for part in COPY_PARTS}
    rows = [r for part in COPY_PARTS for r in timing_rows(f"copy.{part}", times[part], device)]
    for part in BOTH_PARTS:
        # per round: the parts of one round were timed side by side, under the same load
        shares = spread(list(map(hidden, seconds["compute"], seconds["pinned"], seconds[part])))
        rows += [
            metric(f"copy.{part}.hidden", shares["median"], "", device),
            metric(f"copy.{part}.hidden_iqr", shares["iqr"], "", device),
        ]
    return rows


def copy_overlap(
    size: int = 4000,
    n: int = 50,
    seed: int = 0,
    max_run_time: float = 10.0,
) -> list[dict]:
    """The book's 'Run on GPU1 and copy to CPU', its parts timed side by side in rounds
    (:func:`~d2lrepro.core.timing.alternated`): computing the products alone (compute);
    copying them to the CPU alone, blocking, into fresh pageable memory, as the book's
    ``copy_to_cpu(y)`` (copy), and without blocking, into pinned memory, as its
    ``copy_to_cpu(y, True)`` (pinned); the book's code, the products and then their
    non-blocking copies, all on one stream (book); and each product copied on a side stream
    into pinned memory while the next one computes (overlap). The pinned blocks of the last
    three come from torch's pinned-memory cache and go back to it after each part, so that
    they are the same ``n`` blocks each time (settings.autopar_host_bytes counts them once)."""
    reason = unavailable(cuda=1)
    if reason:
        return unmeasured(_copy_rows(dict.fromkeys(COPY_PARTS, [math.nan]), ""), reason)
    device = torch.device("cuda", 0)
    torch.manual_seed(seed)
    x = torch.rand(size, size, device=device)
    ys = run(x, n)
    copier = torch.cuda.Stream(device)
    synchronize(device)

    def copied(products, non_blocking=False):
        """The book's copy_to_cpu(products, non_blocking), then its synchronize."""
        copies = [y.to("cpu", non_blocking=non_blocking) for y in products]
        synchronize(device)
        return copies

    def overlapped():
        copies = []
        for _ in range(n):
            y = x.mm(x)
            copies.append(torch.empty(y.shape, dtype=y.dtype, pin_memory=True))
            copier.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(copier):
                copies[-1].copy_(y, non_blocking=True)
            y.record_stream(copier)  # keeps y's memory from reuse until the copy is done
        synchronize(device)
        return copies

    parts = {
        "compute": lambda: run(x, n),
        "copy": lambda: copied(ys),
        "pinned": lambda: copied(ys, non_blocking=True),
        "overlap": overlapped,
        "book": lambda: copied(run(x, n), non_blocking=True),
    }
    return _copy_rows(alternated(parts, device, max_run_time=max_run_time), str(device))


AUTOPAR_VARIANTS = {"cpu": "CPU, 2 threads", "streams": "1 GPU, 2 streams", "gpus": "2 GPUs"}
# The book's chains on its 2 GPUs: 50 products of a 4000 x 4000 matrix each.
BOOK_WORKLOAD = {"matmuls": 50, "size": 4000}


def workload(cfg: dict) -> str:
    """A chain's work in words: "10 products of 1000²"."""
    n = cfg["matmuls"]
    return f"{n} product{'s' if n != 1 else ''} of {cfg['size']}²"


def draw_autopar(metrics: pd.DataFrame, path, footer: str, cfg: dict) -> None:
    """Chain a alone, chain b alone, both at once, and a + b, for each variant measured (log
    scale: the CPU's chains and the GPUs' differ ~100x), each group named with the work of its
    chains (``cfg``: the ``autopar`` config; the CPU's chains are smaller), and the book's
    printed times of 2 GPUs in grey, with the book's work, their group drawn with a note why
    where this machine could not run it."""
    table = plotting.metric_table(
        metrics, r"^autopar\.(?P<variant>\w+)\.(?P<part>a|b|both)\.(?P<stat>median_s|iqr_s)$"
    )
    table = table.dropna(subset="value").pivot_table(
        index=["variant", "part"], columns="stat", values="value"
    )
    sums = table.xs("a", level="part")["median_s"] + table.xs("b", level="part")["median_s"]
    table = pd.concat([table, sums.to_frame().assign(part="sum").set_index("part", append=True)])
    measured = [v for v in AUTOPAR_VARIANTS if (v, "both") in table.index]
    variants = measured + ([] if "gpus" in measured else ["gpus"])  # the book's 2 GPUs
    labels = {"a": "a alone", "b": "b alone", "both": "both", "sum": "a + b"}
    table = table.rename(index=labels, level="part")

    fig, ax = plotting.figure(figsize=(6.5, 3))
    x = plotting.grouped_bars(ax, table, variants, list(labels.values()))
    at = {part: x[label][variants.index("gpus")] for part, label in labels.items()}
    reference.draw_printed(ax, "autopar.both", at, what=f" ({workload(BOOK_WORKLOAD)})")
    work = {v: workload(cfg["cpu"] if v == "cpu" else cfg) for v in variants}
    ax.set_xticklabels(
        [
            f"{AUTOPAR_VARIANTS[v]}\n" + (work[v] if v in measured else "(not run here)")
            for v in variants
        ]
    )
    ax.set(
        xlabel="where both chains ran, and each chain's work",
        ylabel="time (s)",
        yscale="log",
        title="Two independent chains of products",
    )
    ax.margins(y=0.15)  # the book's marks clear of the top
    plotting.legend_readable(ax, loc="upper left", bbox_to_anchor=(1.02, 1))
    if "gpus" not in measured:
        notes = metrics.loc[metrics["metric"] == "autopar.gpus.both.median_s", "note"].dropna()
        why = notes.iloc[0] if len(notes) else "it has no timings"
        plotting.note(fig, f"2 GPUs not run here: {why}.")
    plotting.save(fig, path, footer=footer)


def measure(cfg: dict, seed: int) -> list[dict]:
    """Every variant of the section with the ``autopar`` config: two CPU cores (at their own
    sizes), two CUDA streams, two GPUs, and computing while copying."""
    size, n, limit = cfg["size"], cfg["matmuls"], cfg["max_run_time"]
    return [
        *autopar_cpu(cfg["cpu"]["size"], cfg["cpu"]["matmuls"], seed, max_run_time=limit),
        *autopar_streams(size, n, seed, max_run_time=limit),
        *autopar_gpus(size, n, seed, max_run_time=limit),
        *copy_overlap(size, n, seed, max_run_time=limit),
    ]
