"""What a run found, in sentences made from its verdicts and numbers, chapter by chapter: how
many of the book's claims held here, which did not and by how much, which sat within their
measured noise, and what this run could not judge and why. Claims that cannot be judged for
one reason (no GPU, 2 devices, the preset's scale) are grouped under it, and what a device is
on the machines that measured is said once. Nothing here is typed for a run: change a verdict
and the sentences change. Serves every section of the ledger.
"""

from __future__ import annotations

import re

from d2lrepro.core import shortfall
from d2lrepro.pipeline.checks import NOISE
from d2lrepro.pipeline.claims import (
    FAILED_CHECK,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OBSERVED,
    RAN_BESIDE_OTHERS,
    REPRODUCED,
    claimant,
    whose_words,
)
from d2lrepro.pipeline.scaling import OVERRIDE_JUDGES, SCALED_REASON

# What a claim checks: a measurement of this run, or a deterministic printed output of the
# book's code; they are counted apart, since only the first depends on the machine.
KINDS = {"measurement": "measurement", "output": "printed output"}


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def reason_group(reason: str, preset: str) -> str:
    """The reason a claim cannot be judged here, in the words it shares with others of that
    reason: the hardware it lacks (:func:`d2lrepro.core.shortfall.group`: "need a GPU",
    "need 2 devices", "need 2 CPU cores"), "scaled by the cpu preset", "timed beside other
    jobs"; any other reason stands for itself. Missing hardware comes first, as in the
    evaluator."""
    if lacking := shortfall.group(reason):
        return lacking
    if reason.startswith(SCALED_REASON) and OVERRIDE_JUDGES in reason:
        return "scaled by values given with --config or --configfile"
    if reason.startswith(SCALED_REASON):
        return f"scaled by the {preset} preset"
    if reason == RAN_BESIDE_OTHERS:
        return "timed beside other jobs"
    return reason


def folded(rows: list[dict], preset: str) -> list[dict]:
    """The claims of ``rows`` that are not applicable here, one group per reason
    (:func:`reason_group`), the largest first: ``{"why", "rows"}``."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row["verdict"] == NOT_APPLICABLE:
            groups.setdefault(reason_group(row["reason"], preset), []).append(row)
    return [
        {"why": why, "rows": members}
        for why, members in sorted(groups.items(), key=lambda g: -len(g[1]))
    ]


def counted(n: int, why: str) -> str:
    """``n`` claims and their reason as a phrase: "2 need a GPU", "1 needs 2 GPUs"."""
    return f"{n} {'needs' + why[4:] if n == 1 and why.startswith('need ') else why}"


def not_judged(rows: list[dict], preset: str) -> str:
    """ "12 need a GPU, 10 scaled by the cpu preset": how many claims of ``rows`` cannot be
    judged here, by reason."""
    return ", ".join(counted(len(g["rows"]), g["why"]) for g in folded(rows, preset))


def failed_check(reason: str) -> str:
    """What a claim that did not reproduce, or was inconclusive, measured against the book's
    bound: its reason without the prefix and the notes of the measurement (the claim's row
    shows them)."""
    return reason.removeprefix(FAILED_CHECK).split("; note: ")[0]


def tally(held: list, failed: list, unsure: list) -> str:
    """ "2 held, 1 did not and 1 was inconclusive": what became of a group of judged claims."""
    parts = [f"{len(held)} held", f"{len(failed)} did not"]
    if unsure:
        parts.append(f"{len(unsure)} {'was' if len(unsure) == 1 else 'were'} inconclusive")
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def chapter(
    title: str, rows: list[dict], preset: str, whose: dict[str, tuple[str, bool]], hosts: bool
) -> dict:
    """What this run found in one chapter: a summary sentence, then the book's own claims
    counted apart from the rest where the chapter judged both; each claim that did not
    reproduce with its headline, whose claim it is, what its source printed, what this run
    measured and on which devices, and why it differs where the run says; and each
    inconclusive one with what it measured, the book's bound within its spread. ``whose``:
    each claim's :func:`~d2lrepro.pipeline.claims.claimant`; with ``hosts`` (the run measured
    on several machines), each says on which."""
    held = [r for r in rows if r["verdict"] == REPRODUCED]
    failed = [r for r in rows if r["verdict"] == NOT_REPRODUCED]
    # A claim whose every failed check sat within its noise is no evidence against the book:
    # counted apart, never as one that did not hold.
    unsure = [r for r in rows if r["verdict"] == INCONCLUSIVE]
    judged = len(held) + len(failed) + len(unsure)
    kinds = ", ".join(
        plural(n, label) for k, label in KINDS.items() if (n := sum(r["kind"] == k for r in held))
    )
    sentence = f"This run judged {judged} of the chapter's {plural(len(rows), 'claim')}"
    if judged:
        parts = [f"{len(held)} held ({kinds or 'none'})", f"{len(failed)} did not"]
        if unsure:
            one = len(unsure) == 1
            its, lies = ("its", "it lies") if one else ("their", "they lie")
            parts.append(
                f"{len(unsure)} {'was' if one else 'were'} inconclusive (this run could not"
                f" tell which side of {its} bound {lies} on)"
            )
        sentence += ": " + ", ".join(parts[:-1]) + " and " + parts[-1]
    sentence += "."
    judged_rows = held + failed + unsure
    own = [r for r in judged_rows if whose[r["id"]][1]]
    if 0 < len(own) < judged:

        def of(books_own: bool) -> list[list[dict]]:
            return [
                [r for r in g if whose[r["id"]][1] == books_own] for g in (held, failed, unsure)
            ]

        others = sorted({whose[r["id"]][0] for r in judged_rows} - {whose[r["id"]][0] for r in own})
        sentence += (
            f" Of the book's own claims, {tally(*of(True))}; of the others"
            f" ({', '.join(others)}), {tally(*of(False))}."
        )
    # Claims about GPUs that CPU cores measured: numbers about this machine, not the book.
    seen = [r for r in rows if r["verdict"] == OBSERVED]
    if seen:
        sentence += (
            f" {plural(len(seen), 'claim')} about GPUs {'was' if len(seen) == 1 else 'were'}"
            " measured on other devices: shown below as what this machine does, not judged."
        )
    if judged + len(seen) < len(rows):
        sentence += f" Not judged here: {not_judged(rows, preset)}."
    return {
        "title": title,
        "sentence": sentence,
        "failures": [
            {
                "id": r["id"],
                "headline": r["headline"],
                "whose": whose_words(whose[r["id"]][0]),
                "printed": r.get("printed_en") or r.get("printed", ""),
                "measured": failed_check(r["reason"]),
                "plain": r.get("plain", ""),
                "device": r.get("device", ""),
                "hosts": r.get("hosts", "") if hosts else "",
                "explanation": r.get("explanation", ""),
            }
            for r in failed
        ],
        "inconclusive": [
            {
                "id": r["id"],
                "headline": r["headline"],
                "measured": re.sub(f", {NOISE} \\([^)]*\\)", "", failed_check(r["reason"])),
                "plain": r.get("plain", ""),
                "device": r.get("device", ""),
                "hosts": r.get("hosts", "") if hosts else "",
            }
            for r in unsure
        ],
        "observed": [
            {
                "id": r["id"],
                "headline": r["headline"],
                "printed": r.get("printed_en") or r.get("printed", ""),
                "measured": r["measured"],
                "device": r.get("device", ""),
                "hosts": r.get("hosts", "") if hosts else "",
                "explanation": r.get("explanation", ""),
            }
            for r in seen
        ],
    }


def findings(ledger: dict, rows: list[dict], preset: str, hosts: bool = False) -> list[dict]:
    """:func:`chapter` of each chapter of the ledger, in its order, from the claims' ``rows``
    (claims.csv as records); ``hosts``: the run measured on several machines, and each claim
    says on which."""
    section_chapter = {s["id"]: s["chapter"] for s in ledger["sections"]}
    whose = {c["id"]: claimant(ledger, c) for s in ledger["sections"] for c in s["claims"]}
    return [
        chapter(
            about["title"],
            [r for r in rows if section_chapter[r["section"]] == cid],
            preset,
            whose,
            hosts,
        )
        | {"id": cid, "covers": about["covers"], "leaves_out": about["leaves_out"]}
        for cid, about in ledger["chapters"].items()
    ]


def devices_here(records: list[dict], rows: list[dict], preset: str) -> str:
    """What a device is on the machines this run measured on (``records``, as each job saw
    its machine), and whether they could judge the claims about several devices, from the
    claims' ``rows``: said once, at the top of the report."""
    gpus = max(r["cuda_devices"] for r in records)
    cores = max((r["usable_cores"] for r in records if not r["cuda_devices"]), default=0)
    names = ", ".join(sorted({g for r in records for g in r.get("gpus", [])}))
    core = "one CPU core, a worker process pinned to it with one thread"
    if gpus and cores:
        what = (
            f"a GPU for a job that could use GPUs (at most {gpus}: {names}), and {core}, for"
            f" a job that could not (at most {plural(cores, 'core')})"
        )
    elif gpus:
        what = (
            f"a GPU: this run's jobs could use at most {gpus} ({names}). Where there are GPUs,"
            " a run's devices are GPUs only: cores do not stand in for more"
        )
    else:
        what = f"{core}, as this run's jobs could use no GPU: at most {plural(cores, 'core')}"
    groups = {g["why"]: len(g["rows"]) for g in folded(rows, preset)}
    lacking = {why: n for why, n in groups.items() if shortfall.devices_needed(why)}
    if lacking:
        most = max(map(shortfall.devices_needed, lacking))
        judged = (
            "So the claims about several devices cannot be judged here: "
            + ", ".join(counted(n, why) for why, n in lacking.items())
            + f"; a machine whose jobs can use {most} GPUs judges them, and one whose jobs"
            f" can use {most} cores and no GPU those of them that do not need CUDA."
        )
    else:
        on_gpus = sum(n for why, n in groups.items() if shortfall.needs_gpus(why))
        aside = f" ({plural(on_gpus, 'claim')} that need GPUs aside)" if on_gpus else ""
        judged = f"So the claims about several devices are judged here{aside}."
    return f"A device here is {what}. {judged}"
