import json

from d2lrepro.pipeline import claims, judging
from d2lrepro.pipeline.scaling import SCALED_REASON

TIMINGS = """
| date | machine | commit | what | time | result |
|---|---|---|---|---|---|
| 2026-11-28 | 2-core AMD EPYC, no GPU | `ca87aa0` | `cpu` preset from a clean copy | 11 min 09 s | ok |
| 2026-11-28 | 1 × NVIDIA H200, 16-core Intel Xeon | `65c3da6` | `book` preset, stopped by a 320 s limit | 5 min 18 s | 82 of 97 |
| 2026-11-28 | for 1 × NVIDIA H200, 16 cores, estimated on the 2-core machine | `65c3da6`'s job times | `book` preset, **an estimate, not a measurement** | 10 min 08 s to 14 min 43 s | jobs |
"""  # noqa: E501


def row(i: str, reason: str, book_scale_s: dict | None = None) -> dict:
    return {
        "id": i,
        "verdict": claims.NOT_APPLICABLE,
        "reason": reason,
        "book_scale_s": json.dumps(book_scale_s) if book_scale_s is not None else "",
    }


GPU = "needs CUDA, the job that measured it could use none"
TWO = "needs 2 GPUs, the job that measured it could use none"
SCALED = f"{SCALED_REASON}: preset cpu scaled lrs.seeds = [0] (book: [0, 1, 2])"


def test_the_times_of_the_presets_are_read_from_the_table_of_timings():
    rows = judging.timing_rows(TIMINGS)
    assert [r["time"] for r in rows] == ["11 min 09 s", "5 min 18 s", "10 min 08 s to 14 min 43 s"]
    assert rows[0]["what"] == "cpu preset from a clean copy" and rows[0]["commit"] == "ca87aa0"
    assert [judging.gpus_of(r["machine"]) for r in rows] == [0, 1, 1]
    # a run stopped before its end times nothing; an estimate says it is one
    book = judging.reference(rows, "book", 1)
    assert book.startswith("10 min 08 s to 14 min 43 s, estimated for the book preset on 1 ×")
    assert "(docs/timings.md, 2026-11-28, commit 65c3da6's job times)" in book
    assert judging.reference(rows, "book", 2) == ""  # no run on 2 GPUs
    assert judging.reference(rows, "cpu", 0).startswith("11 min 09 s, measured for the cpu")
    assert judging.reference(rows, "cpu", 1) == ""


def test_a_machine_without_gpus_is_told_what_judges_the_rest_and_how_long():
    """Grouped by what is missing, hardware first: each group's claims, the command (a GPU
    machine's, or the book preset in a tree of its own) and its time; the book's scale
    counts each family of runs once."""
    rows = [
        row("a.x", SCALED, {"lrs": 600.0}),
        row("a.y", SCALED, {"lrs": 600.0, "dp.runs.a": 300.0}),
        row("g.1", GPU),
        row("g.2", TWO),
        row("g.3", TWO),
        row("t.1", claims.RAN_BESIDE_OTHERS),
        row("o.1", "the metric cannot be measured here"),
        {"id": "ok", "verdict": claims.REPRODUCED, "reason": "", "book_scale_s": ""},
    ]
    table = judging.judging(rows, "cpu", judging.timing_rows(TIMINGS), gpus_here=0)
    assert [g["missing"] for g in table] == [
        "a CUDA GPU",
        "2 GPUs",
        "the book's scale",
        "timings taken with no other job beside them",
        "the metric cannot be measured here",
    ]
    gpu, two, scale, alone, other = table
    assert gpu["ids"] == ["g.1"] and two["ids"] == ["g.2", "g.3"]
    assert gpu["command"] == "CUDA_VISIBLE_DEVICES=0 .venv/bin/snakemake --cores all"
    assert two["command"] == "CUDA_VISIBLE_DEVICES=0,1 .venv/bin/snakemake --cores all"
    assert gpu["time"].startswith("10 min 08 s to 14 min 43 s, estimated")
    assert two["time"] == "unknown: docs/timings.md records no run on 2 GPUs"
    assert scale["ids"] == ["a.x", "a.y"]
    assert scale["command"] == (
        "git worktree add --detach ../d2l-book && cd ../d2l-book &&"
        ' "$OLDPWD/.venv/bin/snakemake" --cores all --config preset=book'
    )
    assert scale["time"].startswith("about 15 min of training")  # 600 s + 300 s, not 1500 s
    assert "--config" not in alone["command"] and "cd ../d2l-alone" in alone["command"]
    assert alone["time"].startswith("11 min 09 s, measured for the cpu preset")
    assert other["command"] == "" and other["time"] == ""


def test_a_machine_with_one_gpu_is_told_what_more_gpus_would_judge():
    rows = [row("g.2", TWO), row("d.2", "needs 2 devices, the job that measured it could use 1")]
    rows.append(row("t.1", claims.RAN_BESIDE_OTHERS))
    table = judging.judging(rows, "book", judging.timing_rows(TIMINGS), gpus_here=1)
    assert [g["missing"] for g in table][:2] == ["2 GPUs", "2 GPUs"]
    assert {g["why"] for g in table[:2]} == {"need 2 GPUs", "need 2 devices"}
    assert all(g["command"].startswith("CUDA_VISIBLE_DEVICES=0,1 ") for g in table[:2])
    alone = table[2]
    assert "the auto preset: book on this machine" in alone["where"]
    assert alone["time"].startswith("10 min 08 s to 14 min 43 s, estimated for the book preset")


def test_no_run_of_a_scaled_claim_trained_here_gives_no_time():
    table = judging.judging([row("a.x", SCALED, {})], "cpu", [], gpus_here=0)
    assert table[0]["time"].startswith("not estimated")
