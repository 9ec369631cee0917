"""The shipped ledger's claims as data: every check reads the metrics it names, every book id has
a claim, every setting a claim depends on exists."""

import re

import pandas as pd
import pytest
import yaml

from conftest import REPO, measured_on
from d2lrepro.core.results import RUN_SPREAD, metric, named_unit
from d2lrepro.pipeline import checks, claims, settings

LEDGER = claims.load()
CLAIMS = [c for s in LEDGER["sections"] for c in s["claims"]]
# A machine with everything a claim may require.
EVERYTHING = {"cuda_devices": 8, "usable_cores": 8}


def under(bound: float) -> float:
    """A value below ``bound``, positive where the bound is (a time, a rate, a distance)."""
    return bound / 2 if bound > 0 else bound - 1


def over(metric: str, bound: float) -> float:
    """A value above ``bound``, at most 1 for a p-value."""
    return (bound + 1) / 2 if named_unit(metric) == "p" else bound + 1


def contradicting(check: dict) -> dict[str, float]:
    """Values of the check's metrics that break it (spreads of zero), each inside the domain
    of the unit its name says, so that the check and not the domain fails them."""
    kind = check["kind"]
    if kind == "above":
        return {check["metric"]: under(check["bound"])}
    if kind == "below":
        return {check["metric"]: over(check["metric"], check["bound"])}
    if kind == "within":
        scale = abs(check["target"]) if check.get("relative") else 1
        return {check["metric"]: check["target"] + 2 * check["tol"] * scale + 1}
    if kind == "typical":  # every run far above the editions' window, and many of them
        far = check["high"] + 2 * (check["high"] - check["low"]) + 1
        parts = {f"{check['metric']}_{p}": far for p in RUN_SPREAD[:-1]}
        return {check["metric"]: far, **parts, f"{check['metric']}_runs": 20}
    if kind == "ratio_above":
        return {check["numerator"]: under(check["bound"]), check["denominator"]: 1}
    if kind == "ratio_below":
        return {check["numerator"]: check["bound"] + 1, check["denominator"]: 1}
    if kind == "sum_of_parts":
        return {check["whole"]: len(check["parts"]) + 1} | dict.fromkeys(check["parts"], 1)
    if kind == "exact":
        return {check["metric"]: check["expected"] + 1}
    if kind == "ordering":
        n = len(check["metrics"])
        if check["order"] == "increasing":
            return {m: n - i for i, m in enumerate(check["metrics"])}
        return {m: i + 1 for i, m in enumerate(check["metrics"])}
    raise AssertionError(f"no contradiction for {kind}")


def evidence(claim: dict, values: dict[str, float]) -> pd.DataFrame:
    """The metrics of ``claim``'s checks at ``values``, the others 1; a spread is measured but
    far narrower than any bound's margin, and a test's least p-value reaches its bound."""
    names = {n for check in claim["checks"] for n in checks.metrics_of(check)}
    spreads = {n for check in claim["checks"] for n in check.get("spread", {}).values()}
    least = {check["least"] for check in claim["checks"] if "least" in check}
    default = {n: 1e-9 for n in spreads} | dict.fromkeys(least, 0.0)
    return pd.DataFrame([metric(n, values.get(n, default.get(n, 1.0))) for n in sorted(names)])


@pytest.mark.parametrize(
    "claim, index",
    [(c, i) for c in CLAIMS for i in range(len(c["checks"]))],
    ids=lambda v: v["id"] if isinstance(v, dict) else str(v),
)
def test_every_check_is_wired_to_its_metrics(claim, index):
    """Values that break one check's own bound (the rest of the evidence 1, spreads tiny) read "not
    reproduced": the check reads the metrics it names and is judged. It does not show that the
    bound is as strong as the book's: values are built from the bound, however lenient it is
    (the mutation tests show the claims failing on broken code)."""
    values = contradicting(claim["checks"][index])
    row = claims.evaluate_claim(claim, *measured_on(evidence(claim, values), EVERYTHING))
    assert row["verdict"] == claims.NOT_REPRODUCED, row
    assert not row["reason"].startswith("no number"), row  # the check failed, not the domain


def test_every_claim_names_what_it_is_judged_at_when_it_trains():
    """A claim on a training run's outcome says which settings it depends on."""
    trained = ("lrs.baseline", "mgpu.1gpu", "mgpuc.1gpu", "mgpuc.2gpu.acc")
    for claim in CLAIMS:
        if claim["id"] in trained:
            assert claim.get("depends_on"), claim["id"]


BOOK_LEDGER = REPO.parent / "shared" / "reference" / "book_outputs.md"


def book_ids(text: str) -> list[str]:
    """The ids of the book ledger's sections 2 to 15 (its chapters' sections), in its order:
    the first cell of their table rows."""
    ids = []
    for section in re.split(r"^## ", text, flags=re.M):
        number = re.match(r"(\d+)\.", section)
        if number and 2 <= int(number.group(1)) <= 15:
            ids += re.findall(r"^\|\s*([a-z][a-z0-9_]*\.[\w.]+)\s*\|", section, re.M)
    return list(dict.fromkeys(ids))


def test_book_ids_are_read_from_the_tables_of_the_chapters_sections():
    text = "## 1. Helpers\n| x.y | a |\n## 2. Intro\n| id | a |\n|---|\n| intro.risk | b |\n"
    assert book_ids(text + "| intro.risk | c |\n## 16. Notes\n| z.w | d |\n") == ["intro.risk"]


def test_every_book_id_has_a_claim_in_the_books_order():
    if not BOOK_LEDGER.exists():
        pytest.skip(f"no book ledger at {BOOK_LEDGER}")
    ids = book_ids(BOOK_LEDGER.read_text())
    ours = [c["id"] for c in CLAIMS]
    assert not [i for i in ids if i not in ours], "book ids without a claim"
    assert [i for i in ours if i in ids] == ids


def leaves(config: dict, prefix: str = "") -> list[str]:
    """Every setting of ``config`` as a dotted key."""
    keys = []
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        keys += leaves(value, dotted + ".") if isinstance(value, dict) and value else [dotted]
    return keys


def test_every_setting_a_claim_depends_on_exists():
    """A misspelt key in depends_on would never match a preset's change, and the claim would
    be judged on a scaled run as if it ran at the book's scale."""
    import yaml

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    known = leaves({k: v for k, v in config.items() if k != "presets"})
    for claim in CLAIMS:
        explanation = claim.get("explained_by", {})
        for key in claim.get("depends_on", []) + explanation.get("depends_on", []):
            assert any(k == key or k.startswith(key + ".") for k in known), (claim["id"], key)


def test_every_claim_has_a_headline_of_at_most_20_words():
    for claim in CLAIMS:
        assert 1 <= len(claim["headline"].split()) <= 20, claim["id"]


def test_a_headline_of_21_words_is_rejected(tmp_path):
    import jsonschema
    import yaml

    from d2lrepro.core import paths

    ledger = claims.load()
    ledger["sections"][0]["claims"][0]["headline"] = " ".join(["word"] * 21)
    schema = yaml.safe_load(paths.CLAIMS_SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError, match="headline|does not match"):
        jsonschema.Draft202012Validator(schema).validate(ledger)


def test_a_claim_names_only_a_figure_its_section_draws(tmp_path):
    ledger = settings.read_yaml(claims.LEDGER)
    ledger["sections"][1]["claims"][0]["figure"] = "no_such_figure"
    broken = tmp_path / "claims.yaml"
    broken.write_text(yaml.safe_dump(ledger, allow_unicode=True))
    with pytest.raises(ValueError, match="name a figure their section does not draw"):
        claims.load(broken)
