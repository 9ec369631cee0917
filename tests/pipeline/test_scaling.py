"""What a preset scaled that a claim depends on, and how long its book-scale run would take
(d2lrepro.pipeline.scaling)."""

import pytest

from d2lrepro.pipeline import scaling


def test_the_most_specific_family_of_jobs_is_the_one_timed():
    """The ε sweep's jobs are the family airfoil.eps_sweep: the optimizer sweep's jobs
    (family airfoil) do not count towards a claim about the ε sweep, though its settings sit
    under airfoil too."""
    seconds = {"airfoil": 600.0, "airfoil.eps_sweep": 30.0}
    deviations = [("airfoil.eps_sweep.eps", [1, 2, 3, 4], [1, 2])]
    reason = scaling.scaled_reason(
        ["airfoil.epochs", "airfoil.eps_sweep"], deviations, "smoke", seconds
    )
    assert "at most about 60 s of job time here" in reason  # 30 s x 4 / 2
    other = scaling.scaled_reason(
        ["airfoil.seeds"], [("airfoil.seeds", [0, 1], [0])], "smoke", seconds
    )
    assert "at most about 20 min of job time here" in other  # 600 s x 2


def test_a_scaled_setting_with_no_known_work_factor_still_names_the_job_time():
    seconds = {"hardware": 42.0}
    reason = scaling.scaled_reason(
        ["hardware.latency_max_mib"], [("hardware.latency_max_mib", 256, 4)], "smoke", seconds
    )
    assert "this run's jobs of it took 42 s, the book's settings do more work" in reason


def test_a_preset_with_more_seeds_than_the_books_says_it_does_more_work():
    more = [("lr_schedules.seeds", [0, 1, 2], [0, 1, 2, 3, 4, 5])]
    reason = scaling.scaled_reason(["lr_schedules.seeds"], more, "many", {"lr_schedules": 90.0})
    assert "this preset does about 2x the work of the book's settings" in reason
    assert "book's settings do more work" not in reason


def test_a_run_the_preset_left_out_is_named_as_left_out_and_not_estimated():
    left_out = [("data_parallel.runs.resnet18_b256.2", {"model": "resnet18"}, scaling.LEFT_OUT)]
    seconds = {"data_parallel": 60.0}
    reason = scaling.scaled_reason(
        ["data_parallel.runs.resnet18_b256.2"], left_out, "smoke", seconds
    )
    assert reason.startswith(
        f"{scaling.SCALED_REASON}: preset smoke left out data_parallel.runs.resnet18_b256.2;"
        " no job of this run ran data_parallel.runs.resnet18_b256.2, so its book-scale time"
        " is not estimated"
    )
    # beside a scaled run that was timed, the estimate covers that run only, and says so
    both = [*left_out, ("data_parallel.runs.resnet18.2.epochs", 10, 1)]
    reason = scaling.scaled_reason(["data_parallel.runs"], both, "smoke", seconds)
    assert (
        "preset smoke scaled data_parallel.runs.resnet18.2.epochs = 1 (book: 10) and left" in reason
    )
    assert "at most about 10 min of job time" in reason  # 60 s x 10 epochs / 1
    assert "so that estimate leaves it out" in reason


@pytest.mark.parametrize(
    "metric, named",
    [
        ("resnet18_b256.2.test_acc", True),
        ("resnet18.2.test_acc", False),  # another run
        ("mgpu.2.speedup", False),  # "2" alone names no run
        ("multistep.intended.test_acc", True),
        ("multistep.as_written.test_acc", False),
        ("multistep.intendd.test_acc", False),  # a typo is no left-out value
    ],
)
def test_a_missing_metric_is_explained_only_by_what_the_preset_left_out(metric, named):
    deviations = [
        ("data_parallel.runs.resnet18_b256.2", {"model": "resnet18"}, scaling.LEFT_OUT),
        ("lr_schedules.semantics", ["as_written", "intended"], ["as_written"]),
        ("lr_schedules.epochs", 30, 6),
    ]
    depends_on = ["data_parallel.runs", "lr_schedules.semantics", "lr_schedules.epochs"]
    assert scaling.names_left_out(metric, depends_on, deviations) is named
    # a claim that does not depend on what was left out is not excused
    assert not scaling.names_left_out(metric, ["lr_schedules.epochs"], deviations)
