"""Figures in the book's style, saved as PNG (d2lrepro.core.plotting)."""

import io
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from conftest import inside, labelled_figure
from d2lrepro.core import plotting


@pytest.fixture
def axes():
    fig, ax = plotting.figure()
    yield ax
    plotting.pyplot().close(fig)


def test_a_figure_has_the_book_s_size_and_draws_to_files():
    fig, _ = plotting.figure()
    try:
        assert tuple(fig.get_size_inches()) == plotting.BOOK_FIGSIZE
        assert plotting.pyplot().get_backend().lower() == "agg"
    finally:
        plotting.pyplot().close(fig)


def test_lines_take_the_book_s_formats_in_turn_and_their_labels(axes):
    x = [1, 2, 3]
    plotting.plot_lines(axes, x, [x] * 5, "epoch", "loss", legend=list("abcde"))
    styles = [(line.get_linestyle(), line.get_color()) for line in axes.lines]
    assert styles[1:4] == [("--", "m"), ("-.", "g"), (":", "r")]
    assert styles[4][0] == "-"  # then the formats start over
    assert [line.get_label() for line in axes.lines] == list("abcde")
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("epoch", "loss")
    assert [t.get_text() for t in axes.get_legend().get_texts()] == list("abcde")


def test_lines_without_a_legend_draw_none(axes):
    plotting.plot_lines(axes, [0, 1], [[0, 1], [1, 0]])
    assert len(axes.lines) == 2 and axes.get_legend() is None


def test_a_metric_table_splits_the_matching_names_into_columns():
    metrics = pd.DataFrame(
        {
            "metric": ["hyb.batch1.eager.median_s", "hyb.batch8.script.median_s", "other"],
            "value": ["0.5", "0.25", "1"],
        }
    )
    table = plotting.metric_table(metrics, r"hyb\.batch(\d+)\.(\w+)\.median_s")
    assert table.values.tolist() == [["1", "eager", 0.5], ["8", "script", 0.25]]
    assert table["value"].dtype == float


def test_grouped_bars_draw_one_series_per_bar_across_the_groups(axes):
    table = pd.DataFrame(
        {
            "group": ["g1", "g1", "g2", "g2"],
            "bar": ["a", "b", "a", "b"],
            "median_s": [1.0, 2.0, 3.0, 4.0],
            "iqr_s": [0.1, 0.2, 0.3, None],
        }
    ).set_index(["group", "bar"])
    x = plotting.grouped_bars(axes, table, ["g1", "g2"], ["a", "b"])
    bars = [c for c in axes.containers if hasattr(c, "patches")]
    assert [[p.get_height() for p in c.patches] for c in bars] == [[1.0, 3.0], [2.0, 4.0]]
    assert [c.get_label() for c in bars] == ["a", "b"]
    assert list(axes.get_xticks()) == [0, 1]
    assert {bar: list(at) for bar, at in x.items()} == {"a": [-0.2, 0.8], "b": [0.2, 1.2]}


def test_a_divergence_is_marked_where_it_first_happens(axes):
    history = pd.DataFrame({"epoch": [1, 2, 3, 4], "diverged": [False, False, True, True]})
    plotting.mark_divergence(axes, history)
    assert [line.get_xdata()[0] for line in axes.lines] == [3]
    assert [t.get_text() for t in axes.texts] == [" diverged"]
    plotting.mark_divergence(axes, history.assign(diverged=False))
    plotting.mark_divergence(axes, history.drop(columns="diverged"))
    assert len(axes.lines) == 1


def test_save_writes_a_png_with_its_footer_and_closes_the_figure(tmp_path):
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, [0, 1], [[0, 1]], "x (s)", "y (s)")
    path = tmp_path / "figures" / "s" / "f.png"
    plotting.save(fig, path, footer="node1: Test CPU")
    assert path.read_bytes().startswith(b"\x89PNG")
    assert [t.get_text() for t in fig.texts] == ["node1: Test CPU"]
    assert not plotting.pyplot().fignum_exists(fig.number)


def test_a_long_footer_wraps_inside_the_figure_one_machine_a_line(tmp_path):
    """A line past the figure's edge is cut off in the PNG: the devices and machines that
    measured the data must all show."""
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, [0, 1], [[0, 1]], "x (s)", "y (s)")
    one = "measured on cpu (16 threads), cuda:0 (NVIDIA H200) of vm: Intel(R) Xeon(R) Processor"
    footer = f"{one} (16 cores), torch 2.11.0+cu130; measured on cpu (1 thread) of node2: CPU"
    plotting.save(fig, tmp_path / "f.png", footer=footer)
    (text,) = fig.texts
    assert text.get_text().count("\n") >= 2 and text.get_text().endswith("node2: CPU")
    renderer = FigureCanvasAgg(fig).get_renderer()  # at the figure's dpi, as its bbox
    drawn = text.get_window_extent(renderer)
    assert drawn.x1 <= fig.bbox.x1 and drawn.y0 >= 0
    axes = ax.get_tightbbox(renderer)
    assert axes.y0 >= drawn.y1  # the footer sits under the axes, their labels included


def report_pt(text) -> float:
    """A text's size in points as the report shows its figure (scaled to the report's height)."""
    return text.get_fontsize() * plotting.REPORT_HEIGHT_IN / text.figure.get_figheight()


def test_the_report_height_is_the_templates():
    """Readable sizes are computed for the height the report shows a figure at."""
    template = (Path(__file__).parents[2] / "report" / "report.html.j2").read_text()
    (px,) = re.findall(r"figure img \{ height: (\d+)px", template)
    assert plotting.REPORT_HEIGHT_IN * 96 == int(px)


@pytest.mark.parametrize("height", [1.5, 2.5, 3.0, 4.0])
def test_legends_read_at_7_pt_or_more_in_the_report(height):
    fig, ax = plotting.figure(figsize=(4, height))
    try:
        ax.plot([0, 1], [0, 1], label="a")
        legend = plotting.legend_readable(ax)
        assert min(report_pt(t) for t in legend.get_texts()) >= plotting.READABLE_PT - 1e-9
        plotting.plot_lines(ax, [0, 1], [[1, 0]], legend=["b"])  # d2l.plot's legend too
        assert min(report_pt(t) for t in ax.get_legend().get_texts()) >= 7 - 1e-9
    finally:
        plotting.pyplot().close(fig)


def test_a_panel_without_data_says_why_inside_it(tmp_path):
    fig, (empty, full) = plotting.figure(figsize=(6, 2.8), ncols=2)
    plotting.plot_lines(full, [0, 1], [[0, 1]], "x (s)", "y (s)")
    why = "Not measured here: needs 2 devices, the job that measured it could use 1 (1 GPU)."
    plotting.no_data(empty, why)
    plotting.save(fig, tmp_path / "f.png", footer="node1")
    (text,) = empty.texts
    assert " ".join(text.get_text().split()) == why
    assert list(empty.get_xticks()) == [] and list(empty.get_yticks()) == []
    renderer = FigureCanvasAgg(fig).get_renderer()
    assert inside(text.get_window_extent(renderer), empty.get_window_extent(renderer))
    assert report_pt(text) >= plotting.READABLE_PT


def test_a_note_sits_between_the_axes_and_the_footer_and_fits(tmp_path):
    """A long note (what a figure lacks) wraps to the figure's width; cut at its edges it would
    say nothing."""
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, [0, 1], [[0, 1]], "x (s)", "y (s)")
    plotting.note(fig, "")  # nothing to say: no note
    assert fig.texts == []
    long = "Not run here: 2 dev (lenet.2): needs 2 devices, this job may use 1 GPU. " * 3
    plotting.note(fig, long)
    plotting.save(fig, tmp_path / "f.png", footer="measured on cpu of node1; and node2")
    note, footer = sorted(fig.texts, key=lambda t: t.get_gid() != plotting.NOTE)
    assert " ".join(note.get_text().split()) == long.strip() and note.get_text().count("\n") >= 2
    renderer = FigureCanvasAgg(fig).get_renderer()
    drawn, under = note.get_window_extent(renderer), footer.get_window_extent(renderer)
    assert inside(drawn, fig.bbox) and drawn.y0 >= under.y1  # above the footer
    assert ax.get_tightbbox(renderer).y0 >= drawn.y1  # under the axes and their labels
    assert report_pt(note) >= plotting.READABLE_PT


def test_a_scaled_run_names_its_scale_and_the_book_preset_s():
    scaled = [
        ["lr_schedules.seeds", [0, 1, 2], [0]],
        ["lr_schedules.train_subset", None, 3000],  # null: the whole training set
        ["lr_schedules.test_subset", None, 1000],
        ["lr_schedules.semantics", ["as_written", "intended"], ["as_written"]],  # not a scale
        ["lr_schedules.epochs", 30, 40],
    ]
    assert plotting.scale_note(scaled) == (
        "Scaled from the book preset: 1 of 3 seeds, 3,000 of 60,000 training images,"
        " 1,000 of 10,000 test images, 40 epochs (the book preset: 30)."
    )
    assert plotting.scale_note(scaled[3:4]) == plotting.scale_note([]) == ""


def test_the_scale_of_each_run_is_said_after_its_name():
    scaled = [
        ["data_parallel.seeds", [0, 1, 2], [0]],
        ["data_parallel.runs.resnet18.1.epochs", 10, 1],
        ["data_parallel.runs.resnet18.1.train_subset", None, 1024],
        ["data_parallel.runs.resnet18_b256.2.train_subset", None, 32],
        ["data_parallel.runs.resnet18.2.epochs", 10, 1],
        ["data_parallel.runs.resnet18.2.train_subset", None, 1024],
    ]
    assert plotting.scale_note(scaled) == (
        "Scaled from the book preset: 1 of 3 seeds; resnet18.1, resnet18.2: 1 of 10 epochs,"
        " 1,024 of 60,000 training images; resnet18_b256.2: 32 of 60,000 training images."
    )


def test_save_writes_a_palette_png_no_larger_than_a_quarter_of_a_true_colour_one(tmp_path):
    fig, ax = plotting.figure()
    plotting.plot_lines(ax, [0, 1, 2], [[0, 1, 0], [1, 0, 1]], "x (s)", "y (s)", list("ab"))
    true_colour = io.BytesIO()
    fig.savefig(true_colour, format="png", dpi=plotting.DPI)
    plotting.save(fig, tmp_path / "f.png")
    image = Image.open(tmp_path / "f.png")
    assert image.mode == "P" and len(image.getcolors()) <= plotting.PALETTE
    assert image.size == Image.open(true_colour).size  # at the same dpi, as legible
    assert (tmp_path / "f.png").stat().st_size < len(true_colour.getvalue()) / 2


def test_a_run_saves_a_figure_a_reader_would_miss_something_in_and_logs_what(
    tmp_path, caplog, monkeypatch
):
    monkeypatch.undo()  # the save of a run, not the tests' (conftest), which fails
    fig, ax = labelled_figure(a=[0, 1])
    ax.set_ylabel("")
    plotting.save(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").exists()
    assert caplog.messages == [f"figure {tmp_path / 'f.png'}: panel 1: its y axis has no label"]


def test_a_scaled_panel_says_so_inside_it_in_short(tmp_path):
    scaled = [
        ["data_parallel.seeds", [0, 1, 2], [0]],
        ["data_parallel.runs.resnet18.1.epochs", 10, 1],
        ["data_parallel.runs.resnet18.1.train_subset", None, 1024],
        ["data_parallel.runs.resnet18_b256.2.epochs", 10, 1],
        ["data_parallel.runs.resnet18_b256.2.train_subset", None, 32],
    ]
    fig, ax = labelled_figure(a=[0, 1])
    assert plotting.mark_scaled(ax, scaled) == plotting.scale_note(scaled)
    assert plotting.mark_scaled(ax, [["x.semantics", ["a"], ["b"]]]) == "" and len(ax.texts) == 1
    plotting.save(fig, tmp_path / "f.png")
    (tag,) = ax.texts
    said = " ".join(tag.get_text().split())
    assert said == "scaled: 1 seed, 1 epoch, 1,024 or 32 training images"
    renderer = FigureCanvasAgg(fig).get_renderer()
    assert inside(tag.get_window_extent(renderer), ax.get_window_extent(renderer))
    assert report_pt(tag) >= plotting.READABLE_PT
