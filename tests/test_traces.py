import pandas as pd
import pytest
import yaml

from d2lrepro import traces

# The book's printed `epoch 20, x1: %f, x2: %f` for each run of config.yaml (identical in EN, ZH,
# CL).
BOOK = {
    "momentum.gd_eta0.4": ("-0.943467", "-0.000073"),
    "momentum.gd_eta0.6": ("-0.387814", "-1673.365109"),
    "momentum.m2d_b0.5": ("0.007188", "0.002553"),
    "momentum.m2d_b0.25": ("-0.126340", "-0.186632"),
    "adagrad.2d_eta0.4": ("-2.382563", "-0.158591"),
    "adagrad.2d_eta2": ("-0.002295", "-0.000000"),
    "rmsprop.2d": ("-0.010599", "0.000000"),
}


@pytest.fixture(scope="module")
def config(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())


def test_trace_csv_matches_the_book_to_six_decimals(config):
    cfg = config["traces"]
    steps = traces.run_traces(cfg["runs"], cfg["steps"], cfg["start"])
    assert list(steps.columns) == traces.TRACE_COLUMNS
    assert (steps.groupby("run")["step"].max() == 20).all()
    final = {m["metric"]: m["value"] for m in traces.trace_metrics(steps)}
    for run, (x1, x2) in BOOK.items():
        assert (f"{final[f'{run}.x1_final']:f}", f"{final[f'{run}.x2_final']:f}") == (x1, x2), run


def test_weight_curves_match_closed_forms(config):
    m = {row["metric"]: row["value"] for row in traces.weight_metrics(config["weights"])}
    assert m["momentum_weight.beta0.95.t39"] == pytest.approx(0.95**39)
    assert m["rmsprop_weight.gamma0.9.t0"] == pytest.approx(0.1)
    assert m["rmsprop_weight.gamma0.9.sum"] == pytest.approx(1.0, abs=1e-9)
    assert m["scalar.lambda19.t19"] == pytest.approx((1 - 1.9) ** 19)
    assert m["scalar.beyond_edge.abs_final"] > 1  # eta * lambda > 2 diverges


def test_figures_are_written(tmp_path, config):
    steps = traces.run_traces(
        {"momentum.gd_eta0.4": {"optimizer": "gd", "lr": 0.4}}, 5, (-5.0, -2.0)
    )
    traces.draw_trace(steps, tmp_path / "trace.png")
    figures = {k: tmp_path / f"{k}.png" for k in ("momentum_weights", "rmsprop_weights", "scalar")}
    traces.draw_weights(config["weights"], figures)
    assert all(p.stat().st_size > 1000 for p in [tmp_path / "trace.png", *figures.values()])


def test_adagrads_effective_lr_decays_as_t_to_the_minus_half_for_a_constant_gradient():
    still = pd.DataFrame({"run": "a", "step": range(21), "x1": 1.0, "x2": 1.0})
    rows = {
        r["metric"]: r["value"]
        for r in traces.adagrad_metrics(still, {"a": {"optimizer": "adagrad", "lr": 0.4}})
    }
    assert rows["a.eff_lr_slope.x1"] == pytest.approx(-0.5, abs=1e-4)
    assert rows["a.eff_lr_slope.x2"] == pytest.approx(-0.5, abs=1e-6)


def test_on_the_2d_problem_the_gradients_shrink_and_the_decay_is_slower():
    runs = {"adagrad": {"optimizer": "adagrad", "lr": 0.4}, "gd": {"optimizer": "gd", "lr": 0.4}}
    trace = traces.run_traces(runs, 20, (-5.0, -2.0))
    rows = {r["metric"]: r["value"] for r in traces.adagrad_metrics(trace, runs)}
    assert set(rows) == {"adagrad.eff_lr_slope.x1", "adagrad.eff_lr_slope.x2"}
    assert all(-0.5 < value < 0 for value in rows.values())
