import pytest

from conftest import verdict_of
from d2lrepro.optimization import intro
from d2lrepro.pipeline import claims


@pytest.fixture(scope="module")
def measured():
    return {row["metric"]: row["value"] for row in intro.measure(0.01)}


def test_risk_minima_differ(measured):
    assert measured["risk.argmin_empirical"] == pytest.approx(1.02, abs=0.011)
    assert measured["risk.argmin_risk"] == pytest.approx(1.09, abs=0.011)


def test_local_minima_found(measured):
    assert measured["local_min.count"] == 2
    assert measured["local_min.f_global"] < measured["local_min.f_local"]


def test_derivatives_by_autograd_match_closed_forms():
    assert intro.derivatives_at(lambda x: x**3, 2.0) == pytest.approx([12.0, 12.0])


def test_tanh_gradient_at_4(measured):
    assert measured["vanishing.tanh_grad_at_4"] == pytest.approx(0.00134095, rel=1e-5)


def test_saddle_hessian(measured):
    assert (measured["saddle_x2y2.hessian_min_eig"], measured["saddle_x2y2.hessian_max_eig"]) == (
        -2.0,
        2.0,
    )


def test_draw_writes_every_figure(tmp_path):
    names = ["risk", "local_min", "saddle_x3", "saddle_x2y2", "vanishing"]
    paths = {n: tmp_path / f"{n}.png" for n in names}
    intro.draw(paths, 0.05)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths.values())


def test_saddle_x3_verdict_on_each_side(measured):
    rows = intro.measure(0.01)
    assert measured["saddle_x3.f_left_minus_f_0"] == pytest.approx(-(0.01**3))
    assert verdict_of("intro.saddle_x3", rows) == claims.REPRODUCED
    higher = [
        {**r, "value": 1e-6} if r["metric"] == "saddle_x3.f_left_minus_f_0" else r for r in rows
    ]
    assert verdict_of("intro.saddle_x3", higher) == claims.NOT_REPRODUCED


@pytest.mark.parametrize("f", [lambda x: x**4, lambda x: x**2])
def test_saddle_x3_fails_for_a_function_with_a_minimum_at_0(monkeypatch, f):
    """x⁴ has vanishing derivatives at 0 too, but 0 is its minimum; x² curves up."""
    monkeypatch.setattr(intro, "saddle", f)
    assert verdict_of("intro.saddle_x3", intro.measure(0.01)) == claims.NOT_REPRODUCED
