"""Where a torch.compile's time went, for the logs (d2lrepro.performance.compile_phases): the
phases torch counted between two counts, the slowest first in torch's order."""

import logging

import torch

from d2lrepro.performance import compile_phases


def test_the_slowest_phases_are_those_of_the_compile_between_two_counts():
    before = {"compile_inner": 1.0, "codegen": 0.5}
    after = {"compile_inner": 4.0, "codegen": 0.7, "compile_file": 2.25}
    assert compile_phases.slowest(before, after) == "compile_inner 3.0 s, compile_file 2.2 s"
    assert compile_phases.slowest(after, after) == "none took 0.5 s"
    assert compile_phases.slowest({}, {}) == "torch counted none"


def test_a_torch_that_counts_no_phases_loses_the_log_line_only(monkeypatch):
    def broken(**kwargs):
        raise TypeError("another signature")

    monkeypatch.setattr(torch._dynamo.utils, "compile_times", broken)
    assert compile_phases.seconds() == {}
    assert compile_phases.since({}) == "torch counted none"


def test_the_phases_of_what_runs_inside_are_logged_where_counted(monkeypatch, caplog):
    counts = iter([{"compile_inner": 1.0}, {"compile_inner": 3.5}])
    monkeypatch.setattr(compile_phases, "seconds", lambda: next(counts))
    log = logging.getLogger("d2lrepro.test_compile_phases")
    caplog.set_level("INFO", logger=log.name)
    with compile_phases.logged(log, "eager", counted=False):
        pass
    with compile_phases.logged(log, "hyb.batch1 on cpu"):
        pass
    assert caplog.messages == ["hyb.batch1 on cpu: torch.compile's phases: compile_inner 2.5 s"]
