"""The figures of the multi-device sections (d2lrepro.multidevice.parts.figures)."""

import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer

from d2lrepro.core import plotting, reference, results
from d2lrepro.multidevice import parameter_server
from d2lrepro.multidevice.parts import figures, run_results

BOOK = reference.load()


@pytest.fixture
def drawn(monkeypatch):
    """Each figure drawn during the test and its footer, by the stem of the file it would be
    saved as (nothing is saved)."""
    found = {}

    def save(fig, path, footer=None):
        found[Path(path).stem] = (fig, footer)

    monkeypatch.setattr(plotting, "save", save)
    yield found
    for fig, _ in found.values():
        plotting.pyplot().close(fig)


def labels(ax) -> list[str]:
    return [line.get_label() for line in ax.lines]


def test_the_parameter_server_figure_draws_each_run_or_says_why(tmp_path, drawn):
    measured = [
        results.metric(f"{p}.{name}.{stat}_s", seconds)
        for p, seconds in (("ps", 0.2), ("ps.all", 0.1))
        for name in parameter_server.STRATEGIES
        for stat in ("median", "iqr")
    ]
    workers = [results.metric("ps.workers", 2), results.metric("ps.all.workers", 4)]
    both = pd.DataFrame(measured + workers)
    figures.draw_param_server(both, "both.png", "footer")
    sync, pushes = drawn["both"][0].axes
    bars = [c.get_label() for c in sync.containers if isinstance(c, BarContainer)]
    assert bars == ["2 workers", "4 workers"]
    assert drawn["both"][0].texts == []  # nothing missing, nothing to say
    (book,) = [c for c in sync.collections if c.get_label().startswith("book")]
    assert [tuple(c) for c in book.get_facecolor()] == [to_rgba(plotting.BOOK_GREY)]
    model = [line for line in pushes.lines if line.get_label() == "1 server's time / n"]
    assert [line.get_color() for line in model] == ["k"]  # derived from ours: not the book's grey

    only_two = both[~both["metric"].str.startswith("ps.all.")]
    absent = pd.DataFrame(parameter_server.unmeasured_rows("this machine has 2 devices", "ps.all"))
    figures.draw_param_server(pd.concat([only_two, absent]), "two.png", "footer")
    (note,) = drawn["two"][0].texts
    assert " ".join(note.get_text().split()) == (
        "Not run here on all devices: this machine has 2 devices."
    )
    none = pd.DataFrame(parameter_server.unmeasured_rows("needs 2 devices"))
    figures.draw_param_server(none, "none.png", "footer")
    fig = drawn["none"][0]
    sync, pushes = fig.axes
    assert fig.texts == [] and not sync.containers  # the book's marks alone on the left
    (why,) = pushes.texts  # the empty panel says why, inside it
    said = " ".join(why.get_text().split())
    assert said.startswith("Not run here on 2 workers: needs 2 devices.")
    # and the figures draw and save
    figures.draw_param_server(none, tmp_path / "none.png", "footer")


def test_the_throughput_shows_the_runs_made_here_on_a_log_scale(drawn):
    values = {"lenet.1.samples_per_s": 100.0, "lenet.2.samples_per_s": 180.0}
    values["resnet18.2.samples_per_s"] = math.nan  # not made here
    figures.draw_throughput(values, ["lenet.1", "lenet.2", "resnet18.2"], "t.png", "node1")
    fig, footer = drawn["t"]
    (ax,) = fig.axes
    assert [bar.get_height() for bar in ax.patches] == [100.0, 180.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["lenet.1", "lenet.2"]
    assert ax.get_yscale() == "log" and footer == "node1"


def test_the_cost_model_draws_a_panel_per_step_and_no_lines_where_none_was_measured(drawn):
    lenet = pd.DataFrame(
        {
            "batch_per_device": [1, 4],
            "t1": [0.1, 0.3],
            "t2": [0.2, 0.2],
            "max_t1_t2": [0.2, 0.3],
            "measured_step": [0.25, 0.35],
        }
    )
    resnet = pd.DataFrame({"note": ["needs 2 devices, this machine has 1 GPU"]})
    figures.draw_cost({"lenet": lenet, "resnet18": resnet}, "cost.png", "node1")
    drawn_lenet, drawn_resnet = drawn["cost"][0].axes
    assert labels(drawn_lenet) == list(figures.COST_LINES.values())
    assert labels(drawn_lenet)[2:] == ["max(t1, t2)", "t1 + t2", "measured step"]
    assert list(drawn_lenet.lines[3].get_ydata()) == pytest.approx([0.3, 0.5])
    assert [ax.get_title() for ax in (drawn_lenet, drawn_resnet)] == [
        "LeNet from scratch",
        "ResNet-18 through DDP",
    ]
    assert len(drawn_resnet.lines) == 0 and drawn_lenet.get_xscale() == "log"
    # The empty panel says why inside it; the one legend names the lines, readable.
    (why,) = drawn_resnet.texts
    assert " ".join(why.get_text().split()) == (
        "Not measured here: needs 2 devices, this machine has 1 GPU."
    )
    legend = drawn_resnet.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == labels(drawn_lenet)
    assert legend.get_texts()[0].get_fontsize() >= plotting.readable_pt(drawn["cost"][0])
    figures.draw_cost({"resnet18": resnet}, "none.png", "node1")
    (alone,) = drawn["none"][0].axes
    assert alone.texts and alone.get_legend() is None


def history(seed, accs):
    epochs = range(1, len(accs) + 1)
    return pd.DataFrame(
        {"seed": seed, "epoch": epochs, "train_loss": 1.0, "train_acc": 0.5, "test_acc": accs}
    )


def test_the_curves_are_the_median_over_seeds_of_the_runs_made_here_beside_the_book(drawn):
    made = pd.concat([history(0, [0.5, 0.7]), history(1, [0.6, 0.8]), history(2, [0.4, 0.9])])
    histories = {"lenet.1": made, "lenet.2": pd.DataFrame({"note": ["needs 2 devices"]})}

    def label(name, h):
        return f"{name}, {h['seed'].nunique()} seeds"

    figures.draw_test_acc(histories, label, "acc.png", "node1", BOOK, run_results.BOOK_CURVE_IDS)
    fig = drawn["acc"][0]
    (ax,) = fig.axes
    ours = [line for line in ax.lines if line.get_label() == "lenet.1, 3 seeds"]
    assert [list(line.get_ydata()) for line in ours] == [[0.5, 0.8]]
    assert ours[0].get_color() != plotting.BOOK_GREY
    # The book's curves of both runs, in grey, its 1- and 2-device runs in two line styles.
    book = {line.get_label(): line for line in ax.lines if line.get_label().startswith("book")}
    assert {label.split(" ", 2)[-1] for label in book} == {"1 device", "2 devices"}
    assert {line.get_color() for line in book.values()} == {plotting.BOOK_GREY}
    styles = {line.get_label().split(" ", 2)[-1]: line.get_linestyle() for line in book.values()}
    assert styles["1 device"] != styles["2 devices"]
    assert len(ax.lines) == len(book) + 1
    # The run not made here is named with its reason; the legend reads in the report.
    (note,) = fig.texts
    assert note.get_text() == "Not run here: 2 dev (lenet.2): needs 2 devices."
    legend = ax.get_legend()
    assert min(t.get_fontsize() for t in legend.get_texts()) >= plotting.readable_pt(fig)
    figures.draw_epochs(histories, label, "epochs.png", "node1")
    fig = drawn["epochs"][0]
    panels = fig.axes
    assert [labels(ax) for ax in panels] == [["lenet.1, 3 seeds"]] * 3
    assert [ax.get_ylabel() for ax in panels] == ["train loss", "train acc", "test acc"]
    assert [t.get_text() for t in fig.texts] == [note.get_text()]
    legend = panels[-1].get_legend()
    assert min(t.get_fontsize() for t in legend.get_texts()) >= plotting.readable_pt(fig)


def test_runs_not_made_here_are_named_as_the_legend_names_runs():
    unmade = {
        "lenet.2": pd.DataFrame({"note": ["needs 2 devices"]}),
        f"{run_results.SINGLE_PROCESS}lenet.2": pd.DataFrame({"note": ["needs 2 CUDA devices"]}),
        "resnet18.2": pd.DataFrame({"note": ["needs 2 devices"]}),
        "lenet.1": history(0, [0.5]),
    }
    assert figures.not_run(unmade) == (
        "Not run here: 2 dev (lenet.2), 2 dev (resnet18.2): needs 2 devices."
        " Not run here: 2 dev (one process, book's code): needs 2 CUDA devices."
    )
    assert figures.not_run({"lenet.1": history(0, [0.5])}) == ""


def test_the_top_k_log_draws_loss_and_both_accuracies_of_each_run(drawn):
    logged = pd.DataFrame({"train_loss": [2.3, 1.1], "top1": [0.1, 0.6], "top5": [0.5, 0.9]})
    figures.draw_topk({"resnet18_momentum.1": logged}, "topk.png", "node1", "Not run here: x.")
    loss, accuracy = drawn["topk"][0].axes
    assert labels(loss) == ["resnet18_momentum.1"]
    assert labels(accuracy) == ["resnet18_momentum.1 top-1", "resnet18_momentum.1 top-5"]
    assert list(accuracy.lines[1].get_ydata()) == [0.5, 0.9]
    assert [t.get_text() for t in drawn["topk"][0].texts] == ["Not run here: x."]
