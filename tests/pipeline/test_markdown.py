"""The claims as a Markdown table (d2lrepro.pipeline.markdown)."""

import pandas as pd

from d2lrepro.pipeline import markdown

SOURCES = {
    "book": {"label": "the book", "kind": "book"},
    "notes": {"label": "the study notes", "kind": "notes"},
}
LEDGER = {
    "sources": SOURCES,
    "sections": [
        {"id": "s", "claims": [{"id": "s.b", "claimed_by": "book"}]},
        {
            "id": "t",
            "claims": [
                {"id": "t.n", "claimed_by": "notes"},
                {"id": "t.x", "claimed_by": "beyond_book"},
            ],
        },
    ],
}


def claims(*rows) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"id": i, "section": i[0], "printed": p, "measured": m, "verdict": v, "kind": "x"}
            for i, p, m, v in rows
        ]
    )


def test_one_row_per_claim_in_the_report_s_order_with_whose_claim_it_is():
    table = claims(
        ("t.n", "1.96x", "2.1x", "reproduced"),
        ("s.b", "10", "10", "reproduced"),
        ("t.x", "", "0.5 s", "not applicable here"),
    )
    lines = markdown.table(LEDGER, table).splitlines()
    assert lines[:2] == [
        "| id | section | whose claim | book | this run | verdict |",
        "|---|---|---|---|---|---|",
    ]
    assert lines[2:] == [
        "| s.b | s | the book | 10 | 10 | reproduced |",  # section s first, as the ledger
        "| t.n | t | the study notes | 1.96x | 2.1x | reproduced |",
        "| t.x | t | beyond the book |  | 0.5 s | not applicable here |",
    ]


def test_a_cell_stays_one_cell_on_one_line():
    """A pipe would split the cell, a newline end the table, a tag vanish on GitHub."""
    table = claims(("s.b", "|a| < 2\nEN | ZH", "<b>3</b>", "reproduced"))
    row = markdown.table(LEDGER, table).splitlines()[2]
    assert row == "| s.b | s | the book | \\|a\\| &lt; 2 EN \\| ZH | &lt;b>3&lt;/b> | reproduced |"
    assert row.replace("\\|", "").count("|") == len(markdown.COLUMNS) + 1
