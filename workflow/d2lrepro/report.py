"""The HTML report: one self-contained file, figures embedded, sections in the book's order."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import jinja2
import pandas as pd

from .claims import NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED
from .settings import Settings

TEMPLATE = Path(__file__).resolve().parents[2] / "report" / "report.html.j2"


def embed_png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def render(
    ledger: dict,
    claims: pd.DataFrame,
    environment: dict,
    settings: Settings,
    commit: str,
    template: Path = TEMPLATE,
) -> str:
    claims = claims.fillna("")
    sections = []
    for section in ledger["sections"]:
        sections.append(
            {
                **section,
                "figures": [
                    {"src": embed_png(f["file"]), "caption": f["caption"], "file": f["file"]}
                    for f in section.get("figures", [])
                ],
                "rows": claims[claims["section"] == section["id"]].to_dict("records"),
            }
        )
    counts = {
        v: int((claims["verdict"] == v).sum()) for v in (REPRODUCED, NOT_REPRODUCED, NOT_APPLICABLE)
    }
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(template).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template(Path(template).name).render(
        sections=sections,
        counts=counts,
        environment=environment,
        settings=settings,
        commit=commit,
        built=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        verdict_class={REPRODUCED: "ok", NOT_REPRODUCED: "bad", NOT_APPLICABLE: "na"},
    )
