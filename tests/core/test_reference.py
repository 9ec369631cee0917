import math
import re

import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from conftest import REPO
from d2lrepro.core import plotting, reference
from d2lrepro.optimization import airfoil_summary, lr_schedules

BOOK = reference.load()


def test_every_curve_has_both_editions():
    editions = BOOK.groupby(["id", "metric"])["edition"].nunique()
    assert (editions == 2).all() and len(editions) == 22


def test_band_excess_is_zero_inside_and_the_distance_outside():
    curves = pd.DataFrame(
        {
            "id": "c",
            "edition": ["en", "en", "zh", "zh"],
            "metric": "loss",
            "epoch": [1, 2, 1, 2],
            "value": [1.0, 2.0, 1.2, 1.8],
        }
    )
    assert reference.band_excess(curves, "c", "loss", [1, 2], [1.1, 1.9]) == 0
    assert math.isclose(reference.band_excess(curves, "c", "loss", [1, 2], [1.1, 2.3]), 0.3)
    assert math.isclose(reference.band_excess(curves, "c", "loss", [0, 1], [0.5, 0.7]), 0.3)
    assert math.isnan(reference.band_excess(curves, "c", "loss", [5, 6], [1, 1]))
    # a range over seeds that reaches the band is no excess; one that stays above it is
    assert reference.band_excess(curves, "c", "loss", [1, 2], [0.5, 1.0], [1.1, 2.5]) == 0
    gap = reference.band_excess(curves, "c", "loss", [1, 2], [1.5, 2.5], [1.6, 2.6])
    assert math.isclose(gap, 0.5)


def test_the_book_is_judged_against_the_seeds_middle_half_and_their_nearest():
    """The editions' band [0.30, 0.31] at epochs 1 and 2 against five seeds at 0.20, 0.24,
    0.25, 0.26 and 0.295: 0.04 above their middle half (0.24 to 0.26), 0.005 above the
    nearest seed. An outlier far from the book moves neither; a seed at the book takes the
    nearest to 0, but two seeds that each meet the book at one epoch only do not."""
    book = pd.DataFrame(
        {
            "id": "s",
            "edition": ["en", "zh"] * 2,
            "metric": "loss",
            "epoch": [1.0, 1.0, 2.0, 2.0],
            "value": [0.30, 0.31] * 2,
        }
    )

    def excess(*losses, at_2=None) -> dict:
        runs = pd.DataFrame(
            {
                "epoch": [1.0] * len(losses) + [2.0] * len(losses),
                "seed": [*range(len(losses))] * 2,
                "loss": [*losses, *(at_2 or losses)],
            }
        )
        return reference.seeds_excess(book, "s", "loss", runs, "loss")

    seeds = (0.20, 0.24, 0.25, 0.26, 0.295)
    assert excess(*seeds) == pytest.approx(
        {"curve_excess": 0.04, "curve_excess_nearest_seed": 0.005}
    )
    assert excess(*seeds[1:], 0.0) == excess(*seeds)
    assert excess(*seeds[:-1], 0.305)["curve_excess_nearest_seed"] == 0.0
    apart = excess(0.20, 0.24, 0.25, 0.26, 0.305, at_2=[0.20, 0.24, 0.25, 0.305, 0.26])
    assert apart["curve_excess_nearest_seed"] == pytest.approx(0.04)


def test_seeds_before_the_books_first_point_must_reach_the_plots_top():
    """Both editions start at epoch 2 (above the plot's top, 0.35, before it): with ``clip``
    the seeds at epoch 1 are judged against [0.35, inf), their middle half (0.28 to 0.32) 0.03
    under it and their nearest seed (0.34) 0.01; without, epoch 1 is not judged."""
    book = pd.DataFrame(
        {"id": "s", "edition": ["en", "zh"], "metric": "loss", "epoch": 2.0, "value": 0.30}
    )
    runs = pd.DataFrame(
        {
            "epoch": [1.0] * 3 + [2.0] * 3,
            "seed": [0, 1, 2] * 2,
            "loss": [0.26, 0.30, 0.34, 0.30, 0.30, 0.30],
        }
    )
    clipped = reference.seeds_excess(book, "s", "loss", runs, "loss", clip=0.35)
    assert clipped == pytest.approx({"curve_excess": 0.03, "curve_excess_nearest_seed": 0.01})
    unclipped = reference.seeds_excess(book, "s", "loss", runs, "loss")
    assert unclipped == {"curve_excess": 0.0, "curve_excess_nearest_seed": 0.0}


def test_the_books_curves_are_drawn_labelled_by_edition():
    fig, ax = plotting.figure()
    reference.draw(ax, BOOK, "lrs.baseline", "test_acc")
    assert [line.get_label() for line in ax.lines] == ["book EN", "book ZH"]
    assert {line.get_color() for line in ax.lines} == {plotting.BOOK_GREY}
    assert len({line.get_linestyle() for line in ax.lines}) == 2
    plotting.pyplot().close(fig)


def test_two_of_the_books_curves_on_one_axes_differ_in_line_style_editions_in_marker():
    fig, ax = plotting.figure()
    reference.draw(ax, BOOK, "mgpu.1gpu", "test_acc", "1 device", linestyle=":")
    reference.draw(ax, BOOK, "mgpu.2gpu", "test_acc", "2 devices", linestyle="--")
    styles = {line.get_label(): (line.get_linestyle(), line.get_marker()) for line in ax.lines}
    assert styles == {
        "book EN 1 device": (":", "x"),
        "book ZH 1 device": (":", "+"),
        "book EN 2 devices": ("--", "x"),
        "book ZH 2 devices": ("--", "+"),
    }
    assert {line.get_color() for line in ax.lines} == {plotting.BOOK_GREY}
    plotting.pyplot().close(fig)


def test_the_books_printed_times_are_drawn_in_grey_where_asked():
    fig, ax = plotting.figure()
    reference.draw_printed(ax, "hyb.bench", {"eager": 0.0, "script": 1.0}, 0.1, ", scaled")
    en, zh = ax.collections
    assert [c.get_label() for c in (en, zh)] == [f"book {e}, printed, scaled" for e in ("EN", "ZH")]
    assert en.get_offsets().ravel().tolist() == pytest.approx([0.0, 0.21447, 1.0, 0.40545])
    grey = to_rgba(plotting.BOOK_GREY)
    assert all(tuple(c.get_facecolor()[0]) == grey for c in (en, zh))
    plotting.pyplot().close(fig)


def test_figures_with_a_book_counterpart_draw_it(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(reference, "draw", lambda ax, curves, id, metric, *a: drawn.append(id))
    runs = pd.DataFrame(
        {"setting": "adam.yogi", "seed": 0, "epoch": [0.5, 1.0], "loss": [0.3, 0.25]}
    )
    airfoil_summary.draw_setting(runs, tmp_path / "a.png", "footer", BOOK)
    run = pd.DataFrame(
        {
            "run": "cosine",
            "seed": 0,
            "epoch": [1, 2],
            "train_loss": [1.0, 0.5],
            "train_acc": [0.6, 0.8],
            "test_acc": [0.6, 0.7],
            "diverged": False,
        }
    )
    lr_schedules.draw_run(run, tmp_path / "b.png", "footer", BOOK)
    assert drawn == ["adam.yogi", "lrs.cosine_train"]


def test_band_excess_judges_the_points_the_book_clipped():
    """EN starts above the plot's top (0.35) at x = 1, ZH draws 0.36 there: the band at x = 1
    is [0.35, inf); before both editions' first point it is [0.35, inf) alone."""
    curves = pd.DataFrame(
        {
            "id": "c",
            "edition": ["en", "zh", "zh", "en", "zh"],
            "metric": "loss",
            "epoch": [2, 1, 2, 3, 3],
            "value": [0.30, 0.36, 0.31, 0.25, 0.25],
        }
    )
    x = [0.5, 1, 2, 3]
    assert reference.band_excess(curves, "c", "loss", x, [0.40, 0.50, 0.30, 0.25], clip=0.35) == 0
    low = reference.band_excess(curves, "c", "loss", x, [0.34, 0.36, 0.30, 0.25], clip=0.35)
    assert math.isclose(low, 0.01)
    assert reference.band_excess(curves, "c", "loss", x, [0.34, 0.36, 0.30, 0.25]) == 0
    assert math.isclose(
        reference.band_excess(curves, "c", "loss", x, [0.5, 0.34, 0.30, 0.25], clip=0.35), 0.01
    )


def test_edition_gap_is_the_largest_gap_where_both_drew():
    assert math.isclose(reference.edition_gap(BOOK, "momentum.concise", "loss"), 0.030)
    assert math.isclose(reference.edition_gap(BOOK, "rmsprop.scratch", "loss"), 0.008)


def test_airfoil_curve_tolerances_are_the_editions_own_gaps():
    """Each airfoil curve claim's tolerance is the largest EN-ZH gap of its plot."""
    from d2lrepro.pipeline import claims

    checks = {
        check["metric"].removesuffix(".curve_excess"): check["bound"]
        for section in claims.load()["sections"]
        for claim in section["claims"]
        for check in claim["checks"]
        if check.get("metric", "").endswith(".curve_excess")
        and claim["evidence"].endswith("airfoil/metrics.csv")
    }
    assert len(checks) == 13
    for name, bound in checks.items():
        assert bound == round(reference.edition_gap(BOOK, name, "loss"), 3), name


def test_airfoil_final_loss_tolerances_are_the_editions_own_disagreement():
    """Each airfoil claim's final loss is judged against the window its editions print: from the
    least to the greatest of the printed EN/ZH/CL final losses, widened by 0.0005 on either side
    (the rounding of a loss printed to 3 decimals), as the window of 3 editions' runs that the
    seeds' final losses must meet. The printed losses are those of the book's reference
    outputs."""
    from d2lrepro.pipeline import claims

    outputs = REPO.parent / "shared" / "reference" / "book_outputs.md"
    printed_lines = outputs.read_text().splitlines() if outputs.exists() else None
    checked = 0
    for section in claims.load()["sections"]:
        for claim in section["claims"]:
            check = next(
                (c for c in claim["checks"] if c.get("metric", "").endswith(".final_loss")), None
            )
            if check is None:
                continue
            name = claim["id"]
            printed = [
                float(v)
                for v in re.findall(r"\b(?:EN|ZH|CL)(?: loss:)? ([\d.]+)", claim["printed"])
            ]
            assert len(printed) == 3, name
            statement = " ".join(claim["statement"].split())
            low, high = min(printed) - 0.0005, max(printed) + 0.0005
            assert check["kind"] == "typical" and check["editions"] == len(printed), name
            assert (check["low"], check["high"]) == (round(low, 5), round(high, 5)), name
            assert f"{low:.4f} to {high:.4f}, must meet the middle half" in statement, name
            if printed_lines is not None:
                (row,) = [line for line in printed_lines if line.startswith(f"| {name} |")]
                found = re.findall(r"(EN|ZH|CL) `loss: ([\d.]+)", row)
                assert [float(v) for _, v in found] == printed, name
            checked += 1
    assert checked == 13
