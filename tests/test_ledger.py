"""Every claim of the shipped ledger can fail: evidence that contradicts the book, one check at
a time, must read "not reproduced"."""

import pandas as pd
import pytest

from d2lrepro import claims
from d2lrepro.results import metric

LEDGER = claims.load()
CLAIMS = [c for s in LEDGER["sections"] for c in s["claims"]]
# A machine with everything a claim may require.
EVERYTHING = {"cuda_devices": 8, "usable_cores": 8}


def contradicting(check: dict) -> dict[str, float]:
    """Values of the check's metrics that break it (spreads of zero)."""
    kind = check["kind"]
    if kind == "above":
        return {check["metric"]: check["bound"] - 1}
    if kind == "below":
        return {check["metric"]: check["bound"] + 1}
    if kind == "within":
        scale = abs(check["target"]) if check.get("relative") else 1
        return {check["metric"]: check["target"] + 2 * check["tol"] * scale + 1}
    if kind == "ratio_above":
        return {check["numerator"]: check["bound"] - 1, check["denominator"]: 1}
    if kind == "ratio_below":
        return {check["numerator"]: check["bound"] + 1, check["denominator"]: 1}
    if kind == "sum_of_parts":
        return {check["whole"]: len(check["parts"]) + 1} | dict.fromkeys(check["parts"], 1)
    if kind == "exact":
        return {check["metric"]: check["expected"] + 1}
    if kind == "ordering":
        n = len(check["metrics"])
        step = -1 if check["order"] == "increasing" else 1
        return {m: i * step for i, m in enumerate(check["metrics"])} if n else {}
    raise AssertionError(f"no contradiction for {kind}")


def evidence(claim: dict, values: dict[str, float]) -> pd.DataFrame:
    names = {n for check in claim["checks"] for n in claims._metrics_of(check)}
    spreads = {n for check in claim["checks"] for n in check.get("spread", {}).values()}
    return pd.DataFrame(
        [metric(n, values.get(n, 0.0 if n in spreads else 1.0)) for n in sorted(names)]
    )


@pytest.mark.parametrize(
    "claim, index",
    [(c, i) for c in CLAIMS for i in range(len(c["checks"]))],
    ids=lambda v: v["id"] if isinstance(v, dict) else str(v),
)
def test_evidence_against_the_book_is_not_reproduced(claim, index):
    values = contradicting(claim["checks"][index])
    row = claims.evaluate_claim(claim, evidence(claim, values), EVERYTHING)
    assert row["verdict"] == claims.NOT_REPRODUCED, row


def test_every_claim_names_what_it_is_judged_at_when_it_trains():
    """A claim on a training run's outcome says which settings it depends on."""
    trained = ("lrs.baseline", "mgpu.1gpu", "mgpuc.1gpu", "mgpuc.2gpu.acc")
    for claim in CLAIMS:
        if claim["id"] in trained:
            assert claim.get("depends_on"), claim["id"]
