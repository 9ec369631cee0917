"""Tidy result files and the numbers their rows hold (d2lrepro.core.results)."""

import logging
import math
import warnings

import pandas as pd
import pytest

from d2lrepro.core import provenance, results
from d2lrepro.core.results import metric


def test_a_loss_far_above_its_start_is_divergence_too():
    assert not results.exploded(2.5, 2.3) and results.exploded(7.0, 2.3)
    assert results.exploded(math.nan, 2.3) and results.exploded(math.inf, 2.3)
    assert results.diverged([2.3, 0.5, 7.0]) and not results.diverged([2.3, 0.5, 0.4])


def test_late_iqr_is_the_spread_of_the_last_epochs():
    assert results.late_iqr([0.1, 0.2, 0.80, 0.82, 0.84, 0.86, 0.88]) == pytest.approx(0.04)


def test_a_metric_is_written_with_a_known_unit_and_status_only():
    with pytest.raises(ValueError, match="unknown unit 'sec'"):
        metric("a", 1.0, "sec")
    with pytest.raises(ValueError, match="unknown status 'skipped'"):
        metric("a", 1.0, status="skipped")


def test_a_metric_without_a_number_says_why():
    assert results.not_applicable("t", "needs CUDA", "s")["status"] == results.NOT_APPLICABLE
    gone = results.failed("acc", "lenet.1 diverged at epoch 3")
    assert gone["status"] == results.FAILED and math.isnan(gone["value"])
    assert gone["note"] == "lenet.1 diverged at epoch 3"
    with pytest.raises(ValueError, match="'failed' without a note"):
        metric("acc", math.nan, status=results.FAILED)
    rows = results.unmeasured([metric("a", 1.0, "s"), metric("b", 2.0)], "no GPU")
    assert [(r["metric"], r["unit"], r["note"]) for r in rows] == [
        ("a", "s", "no GPU"),
        ("b", "", "no GPU"),
    ]
    assert all(r["status"] == results.NOT_APPLICABLE for r in rows)


def test_only_a_positive_time_size_rate_or_speedup_is_a_measurement():
    assert results.outside_domain(0.0, "s") and results.outside_domain(-1.0, "x")
    assert not results.outside_domain(0.5, "GB/s")
    assert not results.outside_domain(-0.3, "")  # a pure number may be anything finite


@pytest.mark.parametrize("value, outside", [(-0.01, True), (0.0, False), (1.0, False), (1.2, True)])
def test_a_p_value_lies_between_0_and_1(value, outside):
    assert results.outside_domain(value, "p") == outside
    assert results.domain("p") == "a p-value lies between 0 and 1"


@pytest.mark.parametrize("value, outside", [(-1e-9, True), (0.0, False), (3.5, False)])
def test_a_distance_is_never_negative(value, outside):
    """How far a curve strays outside a band, the largest gap between two results, the size of
    a difference: 0 where they agree, never below."""
    assert results.outside_domain(value, "|Δ|") == outside
    assert results.domain("|Δ|") == "a distance is at least 0"


@pytest.mark.parametrize(
    "value, outside", [(-1.0, True), (0.0, False), (0x76E5BE1548FD, False), (2.5, True)]
)
def test_a_digest_s_head_is_a_whole_number_at_least_0(value, outside):
    assert results.outside_domain(value, "hex") == outside
    assert results.domain("hex") == "a digest is a whole number at least 0"


@pytest.mark.parametrize(
    "name, unit",
    [
        ("hyb.batch1.eager.median_s", "s"),
        ("async.cuda.nosync_iqr_s", "s"),
        ("adam.concise.sec_per_epoch_iqr", "s"),
        ("lenet.1.steady_samples_per_s", "samples/s"),
        ("latency.h2d.pinned.mib1.us", "µs"),
        ("lat.l1_ns", "ns"),
        ("serial.file_bytes", "B"),
        ("arch.alexnet.param_mb", "MB"),
        ("arch.alexnet.flops_per_byte", "FLOP/B"),
        ("ps.ring.busbw_iqr_gbps", "GB/s"),
        ("resnet18.speedup_iqr", "x"),
        ("warmup_sweep.sign_p", "p"),
        ("lenet.1.curve_excess", "|Δ|"),
        ("sqrt.as_written.curve_excess_nearest_seed", "|Δ|"),
        ("adagrad.2d_eta2.state_gap", "|Δ|"),
        ("hyb.batch1.script.max_abs_diff", "|Δ|"),
        ("lenet.acc_diff", "|Δ|"),
        # names that say no unit: a signed gap, a count, a ratio, an accuracy
        ("sqrt.as_written.gap", None),
        ("autopar.cpu.a.runs", None),
        ("lat.l2_over_l1", None),
        ("lenet.1.test_acc", None),
    ],
)
def test_a_metric_s_name_says_its_unit(name, unit):
    assert results.named_unit(name) == unit


def test_a_unit_its_name_says_is_not_repeated_after_the_number():
    assert results.with_unit("0.03", "p") == "0.03"  # "sign_p = 0.03", not "0.03 p"
    assert results.with_unit("0.01", "|Δ|") == "0.01"
    assert results.with_unit("2", "s") == "2 s" and results.with_unit("1", "") == "1"


def test_the_sign_test_counts_the_wins_against_a_coin():
    assert results.sign_test_p(5, 5) == 1 / 32
    assert results.sign_test_p(4, 5) == 6 / 32
    assert results.sign_test_p(0, 5) == 1.0
    assert results.sign_test_p(0, 0) == 1.0


def test_the_spread_to_beat_is_across_seeds_where_there_are_several():
    assert results.iqr([1.0]) == 0.0
    assert results.seed_spread([0.1, 0.2, 0.3, 0.4, 0.5], one_run=9.0) == pytest.approx(0.2)
    assert results.seed_spread([0.7], one_run=0.03) == 0.03


def test_an_error_as_one_line_of_a_note():
    assert results.one_line(RuntimeError("\n  kernel build broke\nat line 3")) == (
        "RuntimeError: kernel build broke"
    )
    assert results.one_line(KeyError()) == "KeyError"


def test_metrics_are_written_in_their_columns_and_logged(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(provenance.ATTRIBUTION, raising=False)  # outside a job
    path = tmp_path / "out" / "metrics.csv"
    with caplog.at_level(logging.INFO, logger="d2lrepro"):
        results.write_metrics([metric("a.median_s", 0.25, "s", note="5 runs")], path)
    written = pd.read_csv(path, keep_default_na=False)
    assert list(written.columns) == results.METRIC_COLUMNS
    assert written.iloc[0].to_dict() == {
        "metric": "a.median_s",
        "value": 0.25,
        "unit": "s",
        "device": "cpu",
        "note": "5 runs",
        "status": "",
        "machine": "",
    }
    assert "a.median_s = 0.25 s 5 runs" in caplog.text


def test_the_log_shows_digests_in_hexadecimal_and_byte_counts_in_full(tmp_path, caplog):
    rows = [metric("data.sha1_head", 0x76E5BE1548FD, "hex"), metric("x.bytes", 41943041, "B")]
    with caplog.at_level(logging.INFO, logger="d2lrepro"):
        results.write_metrics(rows, tmp_path / "metrics.csv")
    assert "data.sha1_head = 76e5be1548fd" in caplog.text
    assert "x.bytes = 41,943,041 B" in caplog.text


def test_a_run_that_cannot_happen_here_writes_its_reason(tmp_path, monkeypatch):
    monkeypatch.delenv(provenance.ATTRIBUTION, raising=False)
    path = tmp_path / "lenet.2.csv"
    reason = "needs 2 devices, the job that measured it could use 1 (1 GPU)"
    results.write_not_applicable(path, reason)
    assert pd.read_csv(path).to_dict("list") == {"note": [reason]}


def test_a_text_column_pandas_read_as_numbers_reads_as_empty_text(tmp_path):
    (tmp_path / "m.csv").write_text("metric,value,note\na,1.0,\nb,,\n")
    read = pd.read_csv(tmp_path / "m.csv")
    assert read["note"].dtype == float  # no text at all: pandas reads NaN
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # filling numbers with "" warns, and will raise
        assert list(results.text(read["note"])) == ["", ""]
    assert list(results.text(pd.Series(["x", None]))) == ["x", ""]


def test_metrics_read_back_as_written_with_text_as_text(tmp_path):
    path = tmp_path / "m.csv"
    rows = [metric("a", 1.5, "s", "cpu") | {"machine": "0123"}, results.not_applicable("b", "why")]
    results.write_metrics(rows, path)
    read = results.read_metrics(path).set_index("metric")
    assert read.loc["a", "machine"] == "0123" and read.loc["a", "note"] == ""
    assert read.loc["b", "note"] == "why" and math.isnan(read.loc["b", "value"])


def test_the_spread_of_runs_is_named_after_their_metric():
    spread = results.run_spread("m.final_loss", [4.0, 1.0, 3.0, 2.0, 5.0])
    assert spread == {
        "m.final_loss_q1": 2.0,
        "m.final_loss_q3": 4.0,
        "m.final_loss_min": 1.0,
        "m.final_loss_max": 5.0,
        "m.final_loss_runs": 5.0,
    }
