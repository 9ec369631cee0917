from conftest import verdict_of
from d2lrepro.performance import hybridize_symbolic
from d2lrepro.pipeline.claims import NOT_REPRODUCED, REPRODUCED


def values(rows):
    return {row["metric"]: row["value"] for row in rows}


def test_fancy_func_imperative_and_symbolic():
    rows, printed = hybridize_symbolic.imperative_vs_symbolic()
    assert values(rows) == {"imperative.result": 10, "symbolic.result": 10}
    assert printed.startswith(hybridize_symbolic.evoke_()) and printed.endswith("10\n")
    assert verdict_of("hyb.fancy_func", rows) == verdict_of("hyb.symbolic", rows) == REPRODUCED


def test_each_result_comes_from_its_own_code(monkeypatch):
    # Mutations: a wrong add in the module breaks the imperative cell only; a wrong add in the
    # generated program breaks the symbolic cell only.
    monkeypatch.setattr(hybridize_symbolic, "add", lambda a, b: a * b)
    rows, _ = hybridize_symbolic.imperative_vs_symbolic()
    assert values(rows) == {"imperative.result": 24, "symbolic.result": 10}
    assert verdict_of("hyb.fancy_func", rows) == NOT_REPRODUCED
    assert verdict_of("hyb.symbolic", rows) == REPRODUCED

    monkeypatch.undo()
    monkeypatch.setattr(hybridize_symbolic, "add_", lambda: "\ndef add(a, b):\n    return a - b\n")
    rows, _ = hybridize_symbolic.imperative_vs_symbolic()
    assert values(rows) == {"imperative.result": 10, "symbolic.result": 0}
    assert verdict_of("hyb.fancy_func", rows) == REPRODUCED
    assert verdict_of("hyb.symbolic", rows) == NOT_REPRODUCED
