"""What a reader of a figure needs and must not lose (d2lrepro.core.legibility)."""

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from conftest import inside, labelled_figure
from d2lrepro.core import legibility, plotting


def test_a_figure_a_reader_can_read_has_no_problems():
    fig, ax = labelled_figure(a=[0, 1], b=[1, 0])
    plotting.legend_readable(ax)
    plotting.mark_divergence(ax, pd.DataFrame({"epoch": [1], "diverged": [True]}))
    assert legibility.problems(fig) == []
    plotting.pyplot().close(fig)


def test_a_single_unlabelled_line_needs_no_legend_and_an_empty_panel_no_labels():
    fig, (ax, empty) = plotting.figure(ncols=2)
    plotting.plot_lines(ax, [0, 1], [[0, 1]], "update", "learning rate")
    plotting.no_data(empty, "Not measured here.")
    assert legibility.problems(fig) == []
    plotting.pyplot().close(fig)


def test_a_shared_axis_is_labelled_once():
    fig, (left, right) = plotting.figure(ncols=2, sharey=True)
    for ax in (left, right):
        plotting.plot_lines(ax, [0, 1], [[0, 1]], "epoch")
    left.set_ylabel("learning rate")
    assert legibility.problems(fig) == []
    plotting.pyplot().close(fig)


@pytest.mark.parametrize(
    "spoil, problem",
    [
        (lambda ax: ax.set_ylabel(""), "panel 1: its y axis has no label"),
        (lambda ax: ax.set_xlabel(" "), "panel 1: its x axis has no label"),
        (lambda ax: plotting.legend_readable(ax, handles=ax.lines[:1]), "'b' is in no legend"),
        (lambda ax: ax.plot([0, 1], [2, 2]), "panel 1: 3 lines, not every one labelled"),
        (lambda ax: ax.set_title("max_t1_t2"), "a name from the code: 'max_t1_t2'"),
    ],
)
def test_each_thing_a_reader_would_miss_is_a_problem(spoil, problem):
    fig, ax = labelled_figure(a=[0, 1], b=[1, 0])
    plotting.legend_readable(ax)
    spoil(ax)
    assert problem in legibility.problems(fig)
    plotting.pyplot().close(fig)


def test_a_legend_entry_without_its_line_and_two_lines_without_a_legend_are_problems():
    fig, ax = labelled_figure(a=[0, 1], b=[1, 0])
    assert legibility.problems(fig) == ["'a' is in no legend", "'b' is in no legend"]
    ax.legend(handles=ax.lines, labels=["a", "c"])
    assert "legend entry 'c' names no line" in legibility.problems(fig)
    plotting.pyplot().close(fig)


def test_a_run_s_name_is_not_a_name_from_the_code():
    """Runs go by their names in the config and the report (resnet18_momentum.1)."""
    fig, ax = labelled_figure(**{"1 dev (resnet18_momentum.1)": [0, 1], "ZH": [1, 0]})
    plotting.legend_readable(ax)
    assert legibility.problems(fig) == []
    ax.set_title("resnet18_momentum")
    assert legibility.problems(fig) == ["a name from the code: 'resnet18_momentum'"]
    plotting.pyplot().close(fig)


@pytest.mark.parametrize("legend", ["upper right", "best"])
def test_a_panel_s_tag_goes_where_it_hides_no_data_and_no_legend(tmp_path, legend):
    fig, ax = labelled_figure(a=[0, 0], b=[0.05, 0.05])  # both along the bottom
    ax.set_ylim(-0.1, 1)
    plotting.legend_readable(ax, loc=legend)
    plotting.mark_scaled(ax, [["x.epochs", 30, 1]])
    plotting.save(fig, tmp_path / "f.png")
    (tag,) = ax.texts
    renderer = FigureCanvasAgg(fig).get_renderer()
    drawn_at = tag.get_window_extent(renderer)
    assert not drawn_at.overlaps(ax.get_legend().get_window_extent(renderer))
    assert tag.get_verticalalignment() != "bottom"  # clear of the lines


def test_a_tag_that_would_hide_data_everywhere_goes_above_the_panel_and_its_title(tmp_path):
    fig, ax = plotting.figure()
    y = [[(i * 7 % 10) / 10 for i in range(40)]]  # a zigzag over the whole panel
    plotting.plot_lines(ax, range(40), y, "epoch", "loss")
    ax.set_title("A title")
    plotting.mark_scaled(ax, [["x.epochs", 30, 1], ["x.seeds", [0, 1, 2], [0]]])
    plotting.save(fig, tmp_path / "f.png")
    (tag,) = ax.texts
    renderer = FigureCanvasAgg(fig).get_renderer()
    drawn_at = tag.get_window_extent(renderer)
    assert drawn_at.y0 >= ax.title.get_window_extent(renderer).y1
    assert inside(drawn_at, fig.bbox)
