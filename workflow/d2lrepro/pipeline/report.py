"""The HTML report: one self-contained file, figures embedded, sections in the book's order."""

from __future__ import annotations

import base64
import datetime as dt
import importlib.metadata
import os
import re
from pathlib import Path
from urllib.parse import urljoin

import jinja2
import pandas as pd

from d2lrepro.core import paths, provenance
from d2lrepro.pipeline.claims import (
    FAILED_CHECK,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    OBSERVED,
    REPRODUCED,
    VERDICTS,
    claimant,
    section_categories,
    whose_words,
)
from d2lrepro.pipeline.findings import KINDS, devices_here, findings, folded, not_judged
from d2lrepro.pipeline.judging import judging
from d2lrepro.pipeline.scaling import SCALED_REASON, experiment_of
from d2lrepro.pipeline.settings import Settings, changed_by

TEMPLATE = paths.REPORT_TEMPLATE
SECTION_TEMPLATE = paths.SECTION_TEMPLATE
VERDICT_CLASS = {
    REPRODUCED: "ok",
    NOT_REPRODUCED: "bad",
    INCONCLUSIVE: "unsure",
    OBSERVED: "seen",
    NOT_APPLICABLE: "na",
}


def embed_png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def figure_anchor(section: str, name: str) -> str:
    """The HTML id of figure ``name`` of ``section`` (lrs, baseline -> fig-lrs-baseline)."""
    return f"fig-{section}-{name}".replace(".", "_")


def claim_figure(claim_id: str, section: str, names: list[str]) -> str:
    """The figure of ``section`` a claim is read from: the one named after its id, or after
    the id's longest prefix (``lrs.warmup_train.intended`` -> warmup_train); "" where there
    is none."""
    by_id = {f"{section}.{name}": name for name in names}
    parts = claim_id.split(".")
    for end in range(len(parts), 1, -1):
        name = by_id.get(".".join(parts[:end]))
        if name:
            return name
    return ""


def cited(section: dict, sources: dict) -> list[dict]:
    """The sources ``section`` follows, each with its label, title, where in it, and a link
    (to the book's page where the section names one, and to that page in each edition)."""
    refs = []
    for ref in section["sources"]:
        source = sources[ref["id"]]
        url = source.get("url", "")
        editions = {}
        if url and "page" in ref:
            url = urljoin(url, ref["page"] + ".html")
            editions = {
                label: urljoin(home, ref["page"] + ".html")
                for label, home in source.get("editions", {}).items()
            }
        refs.append(
            {k: source[k] for k in ("label", "title", "kind")}
            | ref
            | {"url": url, "editions": editions}
        )
    return refs


def book_links(printed: str, refs: list[dict]) -> list[dict]:
    """Links to the book's pages of a claim's section (``refs``: :func:`cited`): the page of
    each edition its ``printed`` value quotes by label ("EN 3.0 · ZH 2.7": EN and ZH), else
    the page the section cites. ``{"label", "url"}`` each."""
    links = []
    for ref in refs:
        if not ref.get("page") or not ref["url"]:
            continue
        quoted = {
            label: url
            for label, url in ref["editions"].items()
            if re.search(rf"\b{label}\b", printed)
        }
        links += [{"label": k, "url": v} for k, v in (quoted or {"online": ref["url"]}).items()]
    return links


def _environment(template: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(template).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def shown_reason(reason: str, measured: str) -> str:
    """What a claim's reason adds under its verdict to what it measured: nothing where it only
    repeats the checks (each inconclusive one says that it sat within its noise)."""
    return "" if reason in (FAILED_CHECK + measured, measured) else reason


def with_explanations(claims: pd.DataFrame, ledger: dict) -> pd.DataFrame:
    """claims.csv's rows with empty cells as "", an empty explanation where it has none, the
    reason each shows (:func:`shown_reason`) and whose claim each is, from the ``ledger``
    (:func:`~d2lrepro.pipeline.claims.claimant`)."""
    claims = claims.astype(object).where(claims.notna(), "")
    claims = claims.assign(**{c: "" for c in ("explanation", "plain") if c not in claims})
    shown = [shown_reason(r, m) for r, m in zip(claims["reason"], claims["measured"])]
    by_id = {c["id"]: c for s in ledger["sections"] for c in s["claims"]}
    whose = [whose_words(claimant(ledger, by_id[i])[0]) for i in claims["id"]]
    return claims.assign(shown_reason=shown, whose=whose)


def scale_sentence(section: dict, rows: list[dict], settings: Settings) -> str:
    """What the preset changed of a section's experiments, made from its deviations and the
    claims' verdicts: which claims it left to the book's scale, and which it judged at its
    own (each says what in its row); that it changed nothing only where it did not."""
    experiments = {experiment_of(c.get("evidence", "")) for c in section["claims"]}
    changed = [d.key for d in settings.deviations if d.key.split(".")[0] in experiments]
    if not changed:
        return (
            f"The {settings.preset} preset runs this section's experiments at the book's settings."
        )
    scaled = [r["id"] for r in rows if r["reason"].startswith(SCALED_REASON)]
    at_scale = [r["id"] for r in rows if r["scale"]]
    who = f"The {settings.preset} preset"
    if set(changed) & settings.overridden:
        who = changed_by(settings.preset, settings.overridden, changed).capitalize()
    said = [f"{who} changed {len(changed)} of this section's settings"]
    if scaled:
        said.append(
            f"so {', '.join(scaled)} {'is' if len(scaled) == 1 else 'are'} judged only at the"
            " book's scale"
        )
    if at_scale:
        said.append(
            f"{', '.join(at_scale)} {'was' if len(at_scale) == 1 else 'were'} judged at this"
            " run's scale, as each says"
        )
    return "; ".join(said) + " (the set-up lists every setting it changed)."


def tally(rows: list[dict]) -> dict:
    """Verdict -> kind -> how many of ``rows`` have them."""
    return {
        v: {k: sum(r["verdict"] == v and r["kind"] == k for r in rows) for k in KINDS}
        for v in VERDICTS
    }


def pinned_torch() -> str:
    """The torch version the package pins ("2.13.0"), "" where it is not installed as a
    package (its metadata holds the pins)."""
    try:
        requires = importlib.metadata.requires("d2lrepro") or []
    except importlib.metadata.PackageNotFoundError:
        return ""
    found = [r.split("==", 1)[1] for r in requires if r.replace(" ", "").startswith("torch==")]
    return found[0] if found else ""


def measured_by(
    machines_: list[dict], environment: dict, preset: str, commit: str, pinned: str
) -> str:
    """The report's first line: what measured this run. Each machine its jobs measured on
    (the run's overview where none is recorded) with its CPU, the cores and GPUs its jobs
    could use and its torch (and the pinned version where it differs), then the preset and
    the commit."""
    if not machines_:
        machines_ = provenance.distinct([environment])

    def one(m: dict) -> str:
        cores = "/".join(map(str, m["cores"]))
        gpus = ", ".join(m["gpus"]) if m["gpus"] else "no GPU"
        torch = "/".join(m["torch"])
        differs = pinned and any(not v.startswith(pinned) for v in m["torch"])
        pin = f" (pinned: {pinned})" if differs else ""
        host = f"{m['host']}: " if m.get("host") else ""
        return f"{host}{m['cpu_model']} ({cores} cores), {gpus}, torch {torch}{pin}"

    where = "; ".join(one(m) for m in machines_)
    return f"Measured on {where} · preset {preset} · commit {commit}"


def render(
    ledger: dict,
    claims: pd.DataFrame,
    environment: dict,
    settings: Settings,
    commit: str,
    template: Path = TEMPLATE,
    measured_on: list[dict] = (),
    timings: list[dict] = (),
) -> str:
    """The report: contents that stay in view with each section's verdict counts, the claims
    that did not reproduce listed first, what would judge the claims this run could not
    (``timings``: the measured times of :func:`~d2lrepro.pipeline.judging.timing_rows`),
    then every section with its figures (each opens full size) and its claims, each linked
    to its figure, its evidence file and the book's page. ``environment`` is the run's
    overview; ``measured_on``, the records of the machines its jobs measured on, are listed
    in its set-up where there are several machines, and say what a device is here."""
    claims = with_explanations(claims, ledger)
    sections = []
    for number, section in enumerate(ledger["sections"], 1):
        names = [f["name"] for f in section.get("figures", [])]
        by_id = {c["id"]: c for c in section["claims"]}
        refs = cited(section, ledger["sources"])
        rows = claims[claims["section"] == section["id"]].to_dict("records")
        for row in rows:
            name = by_id[row["id"]].get("figure") or claim_figure(row["id"], section["id"], names)
            row["figure"] = figure_anchor(section["id"], name) if name else ""
            # the report sits in results/, beside the evidence it links to
            row["evidence_href"] = os.path.relpath(row["evidence"], "results")
            row["book_links"] = book_links(row["printed"], refs)
        sections.append(
            {
                **section,
                "number": number,
                "sources": refs,
                "figures": [
                    {
                        "src": embed_png(paths.figure(section["id"], f["name"])),
                        "caption": f["caption"],
                        "anchor": figure_anchor(section["id"], f["name"]),
                    }
                    for f in section.get("figures", [])
                ],
                "rows": [r for r in rows if r["verdict"] != NOT_APPLICABLE],
                "folded": folded(rows, settings.preset),
                "counts": tally(rows),
                "scale_sentence": scale_sentence(section, rows, settings),
            }
        )
    records = claims.to_dict("records")
    # Where the jobs measured on several machines, each claim says on which.
    several_hosts = len({m.get("host") for m in provenance.distinct(measured_on)}) > 1
    gpus_here = max(m["cuda_devices"] for m in list(measured_on) or [environment])
    env = _environment(template)
    return env.get_template(Path(template).name).render(
        sections=sections,
        sources=ledger["sources"],
        counts=tally(records),
        not_judged=not_judged(records, settings.preset),
        judging=judging(records, settings.preset, list(timings), gpus_here),
        # the machines the jobs measured on; the run's overview where none is recorded
        devices=devices_here(list(measured_on) or [environment], records, settings.preset),
        findings=findings(ledger, records, settings.preset, several_hosts),
        several_hosts=several_hosts,
        environment=environment,
        machines=provenance.distinct(measured_on),
        measured_by=measured_by(
            provenance.distinct(measured_on), environment, settings.preset, commit, pinned_torch()
        ),
        settings=settings,
        commit=commit,
        built=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        verdict_class=VERDICT_CLASS,
        kinds=KINDS,
    )


def section_pages(
    ledger: dict, claims: pd.DataFrame, template: Path = SECTION_TEMPLATE
) -> dict[str, str]:
    """Section id -> a page of its claims (sources, summary, and each claim with the book's
    value, its gloss, the measured value and the verdict): `snakemake --report` shows every
    section through its files, and a section without figures has only this one."""
    claims = with_explanations(claims, ledger)
    page = _environment(template).get_template(Path(template).name)
    titles = section_categories(ledger)
    return {
        section["id"]: page.render(
            title=titles[section["id"]],
            section=section,
            sources=cited(section, ledger["sources"]),
            rows=claims[claims["section"] == section["id"]].to_dict("records"),
            verdict_class=VERDICT_CLASS,
            kinds=KINDS,
        )
        for section in ledger["sections"]
    }
