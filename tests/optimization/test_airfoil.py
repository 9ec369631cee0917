import math

import pandas as pd
import pytest
import torch

from d2lrepro.core import reference, results
from d2lrepro.optimization import airfoil, airfoil_summary

BOOK = reference.load()


@pytest.fixture(scope="module")
def data(linear_data):
    return linear_data


SETTINGS = {
    "momentum.lr0.02_m0.5": {
        "implementation": "scratch",
        "optimizer": "sgd_momentum",
        "lr": 0.02,
        "momentum": 0.5,
    },
    "momentum.concise": {
        "implementation": "torch",
        "optimizer": "sgd_momentum",
        "lr": 0.005,
        "momentum": 0.9,
    },
    "adam.concise": {"implementation": "torch", "optimizer": "adam", "lr": 0.01},
}


def run(name, data, seeds=(0, 1)):
    epochs = {"scratch": 2, "torch": 1}
    return airfoil.run_sweep({name: SETTINGS[name]}, data, seeds, epochs, 10, 100)[name]


def test_the_settings_take_turns_within_each_seed(data, monkeypatch):
    """Seed 0 of every setting, then seed 1: a load that changes while the sweep runs falls
    on every setting alike. torch.optim's Adam keeps an audit: each of its seeds runs again,
    audited, right after its timed run."""
    order, train = [], airfoil.train_airfoil
    monkeypatch.setattr(
        airfoil,
        "train_airfoil",
        lambda optimizer, *args, seed, **kwargs: (
            order.append((optimizer, seed)) or train(optimizer, *args, seed=seed, **kwargs)
        ),
    )
    names = ["momentum.lr0.02_m0.5", "adam.concise"]
    runs = airfoil.run_sweep(
        {n: SETTINGS[n] for n in names}, data, [0, 1], {"scratch": 1, "torch": 1}, 10, 100
    )
    assert order == [(o, seed) for seed in (0, 1) for o in ("sgd_momentum", "adam", "adam")]
    assert list(runs) == names and set(runs["adam.concise"]["seed"]) == {0, 1}


def test_one_setting_over_seeds(data):
    runs = run("momentum.lr0.02_m0.5", data)
    assert set(runs["seed"]) == {0, 1}
    assert runs.groupby("seed")["examples"].max().tolist() == [600, 600]
    columns = {"setting", "implementation", "optimizer", "lr", "momentum", "loss", "elapsed"}
    assert columns | {"host"} <= set(runs.columns)
    assert runs.loc[runs.seed == 0, "loss"].tolist() != runs.loc[runs.seed == 1, "loss"].tolist()


def test_summary_takes_the_median_final_loss(data):
    runs = pd.concat(
        [run("momentum.lr0.02_m0.5", data, seeds=(0, 1, 2)), run("momentum.concise", data)]
    )
    summary = {m["metric"]: m["value"] for m in airfoil_summary.setting_metrics(runs, BOOK)}
    finals = runs[runs.setting == "momentum.lr0.02_m0.5"].groupby("seed")["loss"].last()
    assert summary["momentum.lr0.02_m0.5.final_loss"] == pytest.approx(finals.median())
    assert summary["momentum.concise.diverged_seeds"] == 0
    per_epoch = [
        summary[f"{s}.sec_per_epoch"] for s in ("momentum.lr0.02_m0.5", "momentum.concise")
    ]
    assert summary["airfoil.slowest_sec_per_epoch"] == max(per_epoch) > 0
    assert summary["airfoil.fastest_sec_per_epoch"] == min(per_epoch) > 0


def test_without_a_setting_the_book_ran_its_times_are_not_applicable(data):
    """Settings the book has no curve of do not stand in for its slowest and fastest."""
    runs = run("momentum.lr0.02_m0.5", data).assign(setting="momentum.not_in_the_book")
    summary = {m["metric"]: m for m in airfoil_summary.setting_metrics(runs, BOOK)}
    slowest = summary["airfoil.slowest_sec_per_epoch"]
    assert slowest["status"] == results.NOT_APPLICABLE, slowest
    assert "none of the settings the book ran" in slowest["note"]


def test_divergent_setting_is_recorded_not_raised(data):
    setting = {
        "implementation": "scratch",
        "optimizer": "sgd_momentum",
        "lr": 50.0,
        "momentum": 0.9,
    }
    runs = airfoil.run_sweep({"momentum.huge": setting}, data, [0], {"scratch": 2}, 10, 100)
    runs = runs["momentum.huge"]
    summary = {m["metric"]: m["value"] for m in airfoil_summary.setting_metrics(runs, BOOK)}
    assert summary["momentum.huge.diverged_seeds"] == 1
    assert not math.isfinite(summary["momentum.huge.final_loss"])
    statuses = {m["metric"]: m["status"] for m in airfoil_summary.setting_metrics(runs, BOOK)}
    assert statuses["momentum.huge.final_loss"] == "failed"


def test_timings_from_different_hosts_are_not_compared(data, monkeypatch):
    """The slowest and fastest sec/epoch are not applicable once the settings ran on two
    hosts; each setting's own sec/epoch is still shown."""
    here = run("momentum.lr0.02_m0.5", data)
    monkeypatch.setattr(airfoil.socket, "gethostname", lambda: "node7")
    there = run("momentum.concise", data)
    ends = [f"airfoil.{e}_sec_per_epoch{s}" for e in ("slowest", "fastest") for s in ("", "_iqr")]
    rows = {m["metric"]: m for m in airfoil_summary.setting_metrics(pd.concat([here, there]), BOOK)}
    for name in ends:
        assert rows[name]["status"] == "not applicable" and "node7" in rows[name]["note"]
    assert rows["momentum.concise.sec_per_epoch"]["value"] > 0
    one_host = pd.concat([here.assign(host="node7"), there])
    rows = {m["metric"]: m for m in airfoil_summary.setting_metrics(one_host, BOOK)}
    assert all(rows[name]["status"] == "" for name in ends)


def test_concise_runs_are_the_books_train_concise_ch11(data):
    """train_concise_ch11 trains on MSELoss from nn.Linear's default bias: the scratch
    optimizer at twice the lr from that start is the same run."""
    concise = run("momentum.concise", data, seeds=(0,))
    hyper = {"lr": 0.01, "momentum": 0.9}
    features, labels = data["features"], data["labels"]
    doubled, from_zero = (
        airfoil.train_airfoil(
            "sgd_momentum", hyper, features, labels, 1, 10, 0, eval_every=100, start=start
        )["loss"].to_numpy()
        for start in ("concise", "ch11")
    )
    assert concise["loss"].to_numpy() == pytest.approx(doubled, rel=1e-5)
    assert concise["loss"].to_numpy() != pytest.approx(from_zero, rel=1e-3)


def test_the_books_starts_differ_in_the_bias_only():
    """train_ch11 starts from b = 0; train_concise_ch11 keeps nn.Linear's default bias,
    U(±1/√5) for 5 features, drawn from the run's seed after the same w."""
    bound = 5**-0.5
    biases = []
    for seed in range(200):
        ch11, concise = (
            airfoil.airfoil_start(5, torch.Generator().manual_seed(seed), s)
            for s in ("ch11", "concise")
        )
        assert torch.equal(ch11[0], concise[0]) and ch11[0].std() < 0.05
        assert ch11[1].item() == 0.0
        biases.append(concise[1].item())
    assert all(-bound <= b <= bound for b in biases)
    assert min(biases) < -0.9 * bound and max(biases) > 0.9 * bound
    again = airfoil.airfoil_start(5, torch.Generator().manual_seed(0), "concise")[1].item()
    assert again == biases[0]


def test_torch_runs_start_from_the_concise_bias_unless_told(data):
    """torch.optim runs start from the concise bias unless start='ch11' is asked for."""
    hyper = {"lr": 0.01, "momentum": 0.9}
    runs = {
        start: airfoil.train_airfoil(
            "sgd_momentum",
            hyper,
            data["features"],
            data["labels"],
            epochs=1,
            implementation="torch",
            start=start,
        )["loss"].tolist()
        for start in (None, "concise", "ch11")
    }
    assert runs[None] == runs["concise"] != runs["ch11"]
    with pytest.raises(ValueError, match="start must be"):
        airfoil.train_airfoil(
            "sgd_momentum", hyper, data["features"], data["labels"], epochs=1, start="zero"
        )


@pytest.mark.parametrize("implementation", ["scratch", "torch"])
def test_same_seed_gives_identical_losses(implementation, data):
    runs = [
        airfoil.train_airfoil(
            "sgd_momentum",
            {"lr": 0.01, "momentum": 0.5},
            data["features"],
            data["labels"],
            1,
            seed=s,
            implementation=implementation,
        )
        for s in (7, 7, 8)
    ]
    assert runs[0]["loss"].tolist() == runs[1]["loss"].tolist()
    assert runs[0]["loss"].tolist() != runs[2]["loss"].tolist()


@pytest.mark.parametrize("implementation", ["scratch", "torch"])
def test_divergence_is_recorded_not_raised(implementation, data):
    df = airfoil.train_airfoil(
        "sgd_momentum",
        {"lr": 1e3, "momentum": 0.9},
        data["features"],
        data["labels"],
        2,
        implementation=implementation,
    )
    assert df["diverged"].all()
    assert not math.isfinite(df["loss"].iloc[-1])
    assert df["examples"].iloc[-1] < 3000  # stopped early


def test_rows_every_200_examples(data):
    df = airfoil.train_airfoil(
        "rmsprop", {"lr": 0.01, "gamma": 0.9}, data["features"], data["labels"], epochs=2
    )
    assert list(df.columns) == airfoil.COLUMNS
    seen = list(range(200, 2 * len(data["labels"]) + 1, 200))
    assert len(seen) > 1 and df["examples"].tolist() == seen
    assert df["epoch"].tolist() == pytest.approx([n / len(data["labels"]) for n in seen])
    assert df["elapsed"].is_monotonic_increasing and (df["elapsed"] > 0).all()
    assert not df["diverged"].any()


def test_the_runs_train_on_the_cpu_and_every_summary_row_names_the_runs_devices(data):
    """On a GPU box too: the figure's footer and the claims' device come from these."""
    from conftest import node_record
    from d2lrepro.core import provenance

    runs = pd.concat([run("momentum.lr0.02_m0.5", data), run("momentum.concise", data)])
    assert set(runs["device"]) == {"cpu"}
    assert {r["device"] for r in airfoil_summary.setting_metrics(runs, BOOK)} == {"cpu"}
    # The rows name the runs' devices, not a default: runs elsewhere are named as such.
    elsewhere = airfoil_summary.setting_metrics(runs.assign(device="cuda:0"), BOOK)
    assert {r["device"] for r in elsewhere if r["status"] != "not applicable"} == {"cuda:0"}
    records = {"gpu-job": node_record("gpu-host", cores=16, gpus=1, threads=16)}
    footer = provenance.footer(records, runs.assign(machine="gpu-job"), where="the airfoil runs")
    assert footer.startswith("measured on cpu (16 threads) of gpu-host: Test CPU")
    assert "GPU" not in footer


def test_the_summary_writes_the_runs_metrics_with_the_comparisons_and_a_plot_per_setting(
    data, tmp_path
):
    """A comparison's rows, from their own job, reach the metrics unchanged: its empty text
    cells stay empty and it keeps its machine; the sweep's rows name the runs' machine."""
    from conftest import node_record

    names = ["momentum.lr0.02_m0.5", "momentum.concise"]
    run_files = []
    for name in names:
        run_files.append(tmp_path / f"{name}.csv")
        run(name, data).assign(machine="sweep-job").to_csv(run_files[-1], index=False)
    compared = tmp_path / "compared.csv"
    results.write_metrics(
        [results.metric("momentum.scratch_vs_torch", 0.5, machine="compare-job")], compared
    )
    figures = {name: tmp_path / f"{name}.png" for name in names}
    airfoil_summary.summarize(
        run_files=run_files,
        metric_files=[compared],
        records={"sweep-job": node_record("a"), "compare-job": node_record("b")},
        book=BOOK,
        runs_out=tmp_path / "runs.csv",
        metrics_out=tmp_path / "metrics.csv",
        figure_paths=figures,
    )
    written = pd.read_csv(tmp_path / "metrics.csv", keep_default_na=False).set_index("metric")
    row = written.loc["momentum.scratch_vs_torch"]
    # (values read as text: the metrics that cannot be measured on two settings are empty)
    assert (row["value"], row["machine"], row["unit"], row["note"]) == (
        "0.5",
        "compare-job",
        "",
        "",
    )
    assert written.loc["momentum.concise.sec_per_epoch", "machine"] == "sweep-job"
    assert len(pd.read_csv(tmp_path / "runs.csv")) == sum(len(pd.read_csv(f)) for f in run_files)
    assert all(path.stat().st_size > 0 for path in figures.values())
