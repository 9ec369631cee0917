"""Compilers and interpreters (``hyb.*``): imperative vs symbolic fancy_func
(:mod:`.hybridize_symbolic`), the book's MLP run eagerly, by TorchScript and by torch.compile,
and TorchScript serialization.

Metrics: ``hyb.n_calls``;
``hyb.batch{B}.{mode}.{median_s,iqr_s,runs}`` (time of ``n_calls`` forward calls),
``hyb.batch{B}.{mode}.naive_s`` (the book's one cold loop), ``hyb.batch{B}.{mode}.max_abs_diff``
(against eager), ``hyb.batch{B}.eager_over_{mode}`` and its ``_iqr`` (eager's time over the
mode's, from blocks of calls timed in alternation), ``hyb.batch{B}.naive.*`` (the
book's cold loop in fresh processes: :mod:`.hybridize_cold`); the same on the first GPU as
``hyb.cuda.*`` (without the fresh processes; not applicable where the job has no GPU);
``serial.{file_bytes,params,max_abs_diff}``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from d2lrepro.core import devices, logs, plotting, reference
from d2lrepro.core.models import mlp
from d2lrepro.core.results import failed, metric, not_applicable, one_line, unmeasured
from d2lrepro.core.timing import NAN_TIMING, naive_time, paired_ratio, time_fn, timing_rows
from d2lrepro.performance import compile_phases, hybridize_cold, hybridize_symbolic
from d2lrepro.performance.hybridize_cold import quiet_jit

log = logging.getLogger(__name__)
MODES = ("eager", "script", "compile")
BOOK_PARAMS = 164_482


def convert(net: nn.Module, mode: str) -> Callable:
    """``net`` as run in ``mode``: eager (itself), script (TorchScript) or compile (torch.compile,
    specialized to each input shape; it compiles lazily, on the first call, with one thread)."""
    if mode == "eager":
        return net
    if mode == "script":
        with quiet_jit():
            return torch.jit.script(net)
    if mode == "compile":
        # more threads would start (on CUDA) a pool of compiling processes beside the timings
        return torch.compile(net, dynamic=False, options={"compile_threads": 1})
    raise ValueError(f"unknown mode {mode!r}")


def _hyb_rows(prefix: str, naive: float, timing: dict, diff: float, device: str) -> list[dict]:
    return [
        metric(f"{prefix}.naive_s", naive, "s", device),
        *timing_rows(prefix, timing, device),
        metric(f"{prefix}.max_abs_diff", diff, "|Δ|", device),
    ]


def missing_toolchain(mode: str, device: torch.device) -> str:
    """The tool that ``mode`` needs on ``device`` and this machine lacks, named ("" when none
    is missing): torch.compile builds C++ kernels for the CPU with the compiler that its
    inductor config names, and Triton kernels for CUDA, whose launchers Triton builds with a
    C compiler ($CC, gcc or clang)."""
    if mode != "compile":
        return ""
    # torch.compile's own modules: a second to import, so only when it is asked for
    from torch._inductor import config as inductor_config
    from torch.utils._triton import has_triton

    if device.type == "cuda":
        if not has_triton():
            return "torch.compile on CUDA needs Triton, which is not installed"
        what, names = "a C compiler for Triton's launchers", [os.environ.get("CC"), "gcc", "clang"]
    else:
        cxx = inductor_config.cpp.cxx
        what, names = "a C++ compiler", list(cxx) if isinstance(cxx, list | tuple) else [cxx]
    names = [name for name in names if name]  # None: torch would install one with conda
    if any(shutil.which(name) for name in names):
        return ""
    return f"torch.compile needs {what} ({' or '.join(names)}), and none is on the PATH"


def hybridize(
    batch_sizes=(1, 64, 1024),
    modes=MODES,
    n_calls: int = 1000,
    device="cpu",
    seed: int = 0,
    min_run_time: float = 0.2,
    max_run_time: float = 10.0,
    prefix: str = "hyb",
    cold_batch: int | None = 1,
    cold_pairs: int = 20,
) -> list[dict]:
    """Forward passes of the book's MLP run eagerly, by TorchScript and by torch.compile;
    metric names start with ``prefix``.

    Autograd stays on, as in the book (it calls net(x) without torch.no_grad). For each batch
    size, in the book's order of modes: naive_s is the book's loop of ``n_calls`` calls timed
    once (eager's net has run the shape once, for the reference output), after the earlier cells
    (:func:`~.hybridize_cold.book_earlier_cells`), so it includes TorchScript's profiling runs
    and torch.compile's compilation (on CUDA it also waits for the device, unlike the book);
    median_s and iqr_s are the timing helper's per-call figures times ``n_calls``, its blocks of
    calls standing for the book's loop; max_abs_diff compares the output with eager's. A mode
    whose toolchain is missing (:func:`missing_toolchain`) is not applicable, with what is
    missing; one that raises anyway has failed, with the error's first line. At ``cold_batch``
    (batch 1; None: none) the cold loop is also repeated in ``cold_pairs`` fresh processes."""
    device = torch.device(device)
    eager = mlp(seed).to(device)
    nets, unusable = _converted(eager, modes, device, seed)
    rows = [metric(f"{prefix}.n_calls", n_calls)]
    paired = {"block_s": min_run_time / 10, "max_run_time": max_run_time}
    for batch in batch_sizes:
        x = torch.randn(batch, 512, device=device)
        name = f"{prefix}.batch{batch}"
        timings = (n_calls, device, min_run_time, max_run_time)
        started = time.perf_counter()
        medians, timed = _timed_modes(nets, unusable, x, eager(x).detach(), name, *timings)
        started = logs.progress(log, f"{name} on {device}: the modes timed", started)
        rows += timed + _ratios(nets, unusable, medians, x, name, device, paired)
        started = logs.progress(log, f"{name} on {device}: the ratios timed", started)
        if batch == cold_batch:
            cold = (batch, n_calls, device, seed, cold_pairs)
            rows += _cold_loops(f"{name}.naive", medians, unusable, *cold)
            logs.progress(log, f"{name} on {device}: the cold loops run", started)
    return rows


def _converted(eager: nn.Module, modes, device: torch.device, seed: int) -> tuple[dict, dict]:
    """The net of each mode of ``modes`` made from ``eager``, and every other mode with why it
    is not measured: (row maker, reason), not applicable where not configured or its
    toolchain is missing, failed where the conversion raised."""
    nets = {}
    unusable = {
        mode: (not_applicable, "not run: not among the configured modes")
        for mode in MODES
        if mode not in modes
    }
    for mode in MODES:
        if mode in unusable:
            continue
        missing = missing_toolchain(mode, device)
        if missing:
            unusable[mode] = (not_applicable, missing)
            continue
        try:
            if mode == "script":  # the notebook ran TorchScript before the loop it times
                hybridize_cold.book_earlier_cells(torch.randn(1, 512, device=device), seed + 10_000)
            nets[mode] = convert(eager, mode)
        except Exception as error:  # noqa: BLE001 -- a failure to convert is a result
            unusable[mode] = (failed, one_line(error))
    return nets, unusable


def _timed_modes(nets, unusable, x, reference, name, n_calls, device, min_time, max_time):
    """Each mode's timings on ``x`` (rows under ``name``) and the medians of those measured; a
    mode that raises on its first call joins ``unusable``, failed."""
    rows, medians = [], {}
    for mode in MODES:
        if mode not in unusable:
            with compile_phases.logged(log, f"{name} on {device}", counted=mode == "compile"):
                try:
                    naive, timing, diff = _measure_net(
                        nets[mode], x, reference, n_calls, device, min_time, max_time
                    )
                except Exception as error:  # noqa: BLE001 -- torch.compile fails on its first call
                    unusable[mode] = (failed, one_line(error))
        if mode in unusable:
            make, reason = unusable[mode]
            template = _hyb_rows(f"{name}.{mode}", math.nan, NAN_TIMING, math.nan, "")
            rows += [make(row["metric"], reason, row["unit"]) for row in template]
            continue
        medians[mode] = timing["median"]
        rows += _hyb_rows(f"{name}.{mode}", naive, timing, diff, str(device))
    return medians, rows


def _ratios(nets, unusable, medians, x, name, device, paired) -> list[dict]:
    """Eager's time over each other mode's on ``x``, timed in alternation (rows under
    ``name``); where either was not measured, why."""
    rows = []
    for mode in MODES[1:]:
        ratio_name = f"{name}.eager_over_{mode}"
        if "eager" in medians and mode in medians:
            ratio = paired_ratio(lambda: nets["eager"](x), lambda: nets[mode](x), device, **paired)
            rows += [
                metric(ratio_name, ratio["median"], "x", str(device)),
                metric(f"{ratio_name}_iqr", ratio["iqr"], "x", str(device)),
            ]
        else:
            make, reason = _why_not(unusable, mode)
            rows += [make(ratio_name, reason, "x"), make(f"{ratio_name}_iqr", reason, "x")]
    return rows


def _cold_loops(name, medians, unusable, batch, n_calls, device, seed, pairs) -> list[dict]:
    """The book's cold loops of eager and script at ``batch`` in ``pairs`` fresh processes
    (rows under ``name``); where either was not measured (has no median), why."""
    if {"eager", "script"} <= medians.keys():
        return hybridize_cold.cold_pairs(name, batch, n_calls, device, seed, pairs)
    make, reason = _why_not(unusable, "script")
    return [make(f"{name}.{m}", reason) for m in hybridize_cold.NAMES]


def _why_not(unusable: dict, mode: str) -> tuple[Callable, str]:
    """Why ``mode`` or eager, which it is compared with, was not measured: (row maker,
    reason), ``mode``'s where both were not."""
    return unusable.get(mode) or unusable["eager"]


def _unmeasured(prefix: str, batch_sizes, reason: str) -> list[dict]:
    """The timings :func:`hybridize` writes under ``prefix``, not applicable for ``reason``:
    a device that this job lacks."""
    rows = []
    for batch in batch_sizes:
        name = f"{prefix}.batch{batch}"
        for mode in MODES:
            rows += _hyb_rows(f"{name}.{mode}", math.nan, NAN_TIMING, math.nan, "")
        rows += [
            metric(f"{name}.eager_over_{mode}{end}", math.nan, "x")
            for mode in MODES[1:]
            for end in ("", "_iqr")
        ]
    return unmeasured(rows, reason)


def _measure_net(
    net, x, reference, n_calls, device, min_run_time, max_run_time
) -> tuple[float, dict, float]:
    """The book's cold loop, the timing helper's estimate for ``n_calls`` calls, and the largest
    difference from ``reference``."""

    def loop():
        for _ in range(n_calls):
            net(x)

    naive = naive_time(loop, device, sync=True)
    diff = (net(x) - reference).abs().max().item()
    per_call = time_fn(lambda: net(x), device, min_run_time, max_run_time)
    timing = {
        "median": per_call["median"] * n_calls,
        "iqr": per_call["iqr"] * n_calls,
        "runs": per_call["runs"],
    }
    return naive, timing, diff


def serialize(directory, seed: int = 0) -> list[dict]:
    """The book's net.save('my_mlp'): save the scripted MLP, load it back, compare outputs."""
    path = Path(directory) / "my_mlp"
    path.parent.mkdir(parents=True, exist_ok=True)
    net = convert(mlp(seed), "script")
    with quiet_jit():
        torch.jit.save(net, str(path))
        loaded = torch.jit.load(str(path))
    x = torch.randn(1, 512)
    return [
        metric("serial.file_bytes", path.stat().st_size, "B"),
        metric("serial.params", sum(p.numel() for p in net.parameters())),
        metric("serial.max_abs_diff", (loaded(x) - net(x)).abs().max().item(), "|Δ|"),
    ]


# The book's timed loop: 1000 forward passes at batch 1 on the CPU (reference.PRINTED_S).
BOOK_CALLS, BOOK_BATCH = 1000, 1


def draw_hybridization(metrics: pd.DataFrame, path, footer: str) -> None:
    """Time of n_calls forward passes per batch size and mode: median bars with IQR error bars,
    the book's single cold loop timed here as hollow markers in the bar's colour, and the
    book's printed times (its 1000 calls, scaled to n_calls) in grey; one panel for the CPU
    and, where the first GPU was timed (``hyb.cuda.*``), one for it, else a note why not."""
    panels = {"CPU": "hyb"}
    gpu = metrics["metric"].str.match(r"hyb\.cuda\.batch\d+\.\w+\.median_s$")
    if metrics.loc[gpu, "value"].astype(float).notna().any():
        panels["first GPU"] = "hyb.cuda"
    size = (4.5 * len(panels) + 2.5, 3)
    fig, axes = plotting.figure(figsize=size, ncols=len(panels), squeeze=False)
    legend = {}
    for ax, (where, prefix) in zip(axes[0], panels.items()):
        pattern = rf"^{re.escape(prefix)}\.batch(?P<batch>\d+)\.(?P<mode>\w+)"
        table = plotting.metric_table(metrics, pattern + r"\.(?P<stat>median_s|iqr_s|naive_s)$")
        table["batch"] = table["batch"].astype(int)
        table = table.pivot_table(
            index=["batch", "mode"], columns="stat", values="value", dropna=False
        )
        batches = sorted(table.index.get_level_values("batch").unique())
        modes = [m for m in MODES if m in table.index.get_level_values("mode")]
        n_calls = int(metrics.loc[metrics["metric"] == f"{prefix}.n_calls", "value"].iloc[0])
        x = plotting.grouped_bars(ax, table, batches, modes)
        cold = "one cold loop, timed here"
        ax.scatter([], [], facecolors="none", edgecolors="k", s=18, label=cold)
        if where == "CPU" and BOOK_BATCH in batches:
            at = {m: x[m][batches.index(BOOK_BATCH)] for m in modes}
            scaled = "" if n_calls == BOOK_CALLS else f", {BOOK_CALLS} calls scaled to {n_calls}"
            reference.draw_printed(ax, "hyb.bench", at, n_calls / BOOK_CALLS, scaled)
        ax.set_xticklabels(batches)
        ax.set(
            yscale="log",
            xlabel="batch size",
            ylabel=f"time of {n_calls} calls (s)",
            title=f"MLP forward on the {where}",
        )
        legend |= {label: handle for handle, label in zip(*ax.get_legend_handles_labels())}
    # One legend for both panels, beside them, where it hides no bar or marker.
    plotting.legend_readable(
        axes[0, -1], handles=list(legend.values()), loc="upper left", bbox_to_anchor=(1.02, 1)
    )
    if len(panels) == 1:
        notes = metrics.loc[gpu, "note"].dropna()
        why = notes.iloc[0] if len(notes) else "it has no timings"
        plotting.note(fig, f"The first GPU is not timed here: {why}.")
    plotting.save(fig, path, footer=footer)


def measure(cfg: dict, seed: int, model_dir) -> list[dict]:
    """Every measurement of the section with the ``hybridize`` config: fancy_func both ways,
    the MLP in each mode on the CPU (as the book timed it) and, where there is one, on the
    first GPU (``hyb.cuda.*``; not applicable, with the reason, where the job has none), and
    its serialization into ``model_dir``."""
    rows, printed = hybridize_symbolic.imperative_vs_symbolic()
    log.info("the symbolic cell printed:\n%s", printed)
    timing = dict(
        batch_sizes=cfg["batch_sizes"],
        modes=cfg["modes"],
        n_calls=cfg["n_calls"],
        seed=seed,
        max_run_time=cfg["max_run_time"],
    )
    rows += hybridize(device="cpu", cold_pairs=cfg["cold_pairs"], **timing)
    reason = devices.unavailable(cuda=1)
    if reason:
        rows += _unmeasured("hyb.cuda", cfg["batch_sizes"], reason)
    else:
        rows += hybridize(device="cuda:0", prefix="hyb.cuda", cold_batch=None, **timing)
    return rows + serialize(model_dir, seed)
