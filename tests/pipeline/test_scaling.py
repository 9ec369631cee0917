"""What a preset scaled that a claim depends on, and how long training at the book's scale
would take, at the rates this run's runs measured (d2lrepro.pipeline.scaling)."""

import math

import pandas as pd
import pytest

from d2lrepro.pipeline import scaling, settings


def epochs(seconds, examples=1000, **columns):
    """A run's history: one row per epoch, each of ``examples`` taking ``seconds``."""
    rows = pd.DataFrame({"epoch": range(1, len(seconds) + 1), "seconds": seconds})
    return rows.assign(samples_per_s=examples / rows["seconds"], **columns)


def test_a_run_s_rate_leaves_out_its_first_epoch_and_counts_all_it_trained():
    """The first epoch pays one-off set-up (10 s here); the rate is the later epochs' 1 s per
    1,000 examples, and every epoch's examples are what the run trained."""
    rate = scaling.rate([epochs([10.0, 1.0, 1.0])])
    assert rate == scaling.Rate(3000.0, 0.001)


def test_one_epoch_counts_its_steady_rate_and_several_runs_in_one_file_are_apart():
    """A run of one epoch counts that epoch, at its whole batches' rate where its history
    records one; two seeds in one file are two runs, each with a first epoch of its own."""
    one = epochs([2.0], steady_samples_per_s=[1000.0])
    assert scaling.rate([one]) == scaling.Rate(1000.0, 0.001)
    seeds = pd.concat([epochs([9.0, 2.0], seed=0), epochs([9.0, 2.0], seed=1)])
    assert scaling.rate([seeds]) == scaling.Rate(4000.0, 0.002)


def test_runs_that_trained_nothing_have_no_rate_and_say_why():
    note = pd.DataFrame({"note": ["needs 2 devices, this job may use 1 GPU"]})
    rate = scaling.rate([note, note])
    assert rate.examples == 0 and math.isnan(rate.seconds_per_example)
    assert rate.nothing == "needs 2 devices, this job may use 1 GPU"
    assert scaling.rate([pd.DataFrame(columns=["epoch", "seconds"])]).nothing


def test_rates_read_each_family_s_histories(tmp_path):
    path = tmp_path / "lenet.1.seed0.csv"
    epochs([5.0, 0.5, 0.5]).to_csv(path, index=False)
    found = scaling.rates({"data_parallel.runs.lenet.1": [str(path)], "left_out": []})
    assert found == {"data_parallel.runs.lenet.1": scaling.Rate(3000.0, 0.0005)}


SCHEDULES = [("lr_schedules.train_subset", None, 3000), ("lr_schedules.seeds", [0, 1, 2], [0])]


def test_the_estimate_is_the_book_s_work_at_the_measured_rate_without_start_up():
    """A run of 10 epochs of 3,000 examples, 3 s each after a first of 10 s (its set-up): the
    book's 20 x 3 times as many examples at 1,000 a second take 30 min; counting the first
    epoch would make it 37 min, and scaling the job's whole time (its start-up too) more."""
    rates = {"lr_schedules": scaling.rate([epochs([10.0] + [3.0] * 9, examples=3000)])}
    reason = scaling.scaled_reason(["lr_schedules"], SCHEDULES, "cpu", rates)
    assert "training at the book's settings would take about 30 min here" in reason
    assert "(lr_schedules: 1,000 examples/s, each job sharing the machine as this run" in reason


def test_the_most_specific_family_of_runs_is_the_one_timed():
    """The ε sweep's runs are the family airfoil.adam_eps: the optimizer sweep's runs
    (family airfoil) do not count towards a claim about the ε sweep, though its settings sit
    under airfoil too."""
    rates = {"airfoil": scaling.Rate(1e6, 0.001), "airfoil.adam_eps": scaling.Rate(1e4, 0.001)}
    deviations = [("airfoil.adam_eps.eps", [1, 2, 3, 4], [1, 2])]
    reason = scaling.scaled_reason(
        ["airfoil.epochs", "airfoil.adam_eps"], deviations, "smoke", rates
    )
    assert "would take about 20 s here" in reason  # 10 s x 4 / 2
    other = scaling.scaled_reason(
        ["airfoil.seeds"], [("airfoil.seeds", [0, 1], [0])], "smoke", rates
    )
    assert "would take about 33 min here" in other  # 1,000 s x 2


def test_a_family_that_trained_nothing_gives_no_number_and_says_so():
    """Two ResNet-18 runs of 2 devices on a 1-GPU machine trained nothing: no estimate and no
    work factor comes from them, whatever the preset scaled."""
    idle = scaling.Rate(0.0, math.nan, "needs 2 devices, this job may use 1 GPU")
    rates = {"data_parallel.runs.resnet18.2": idle, "data_parallel.runs.resnet18_b256.2": idle}
    deviations = [
        ("data_parallel.runs.resnet18_b256.2.train_subset", None, 32),
        ("data_parallel.seeds", [0, 1, 2], [0]),
    ]
    depends_on = ["data_parallel.runs.resnet18.2", "data_parallel.runs.resnet18_b256.2"]
    reason = scaling.scaled_reason([*depends_on, "data_parallel.seeds"], deviations, "cpu", rates)
    assert reason.endswith(
        "; data_parallel.runs.resnet18.2 and data_parallel.runs.resnet18_b256.2 trained nothing"
        " in this run (needs 2 devices, this job may use 1 GPU), so no book-scale time is"
        f" estimated ({scaling.BOOK_SCALE_JUDGES})"
    )
    assert "would take" not in reason and "this run's work" not in reason
    # beside a run that trained, the estimate is that run's, and says it leaves the other out
    rates["data_parallel.runs.resnet18.1"] = scaling.Rate(1024.0, 0.001)
    reason = scaling.scaled_reason(
        ["data_parallel.runs.resnet18.1", *depends_on, "data_parallel.seeds"],
        deviations,
        "cpu",
        rates,
    )
    assert "would take about 3 s here" in reason  # 1,024 examples x 3 seeds at 1 ms
    assert "so that estimate leaves them out" in reason


def test_a_family_without_histories_gives_the_work_factor_or_nothing():
    """The timing rules record no training rate: a scaled one says how much more work the
    book's settings are, where a setting says, and never a time."""
    more = [("hybridize.batch_sizes", [1, 64, 1024], [1, 64])]
    reason = scaling.scaled_reason(["hybridize.batch_sizes"], more, "cpu", {})
    assert "the book's settings are about 1.5x this run's work" in reason
    assert "min" not in reason and " s " not in reason
    latency = [("hardware.latency_max_mib", 256, 4)]
    reason = scaling.scaled_reason(["hardware.latency_max_mib"], latency, "smoke", {})
    assert reason.endswith(f"latency_max_mib = 4 (book: 256) ({scaling.BOOK_SCALE_JUDGES})")


def test_a_preset_with_more_seeds_than_the_books_says_it_does_more_work():
    more = [("lr_schedules.seeds", [0, 1, 2], [0, 1, 2, 3, 4, 5])]
    rates = {"lr_schedules": scaling.Rate(1e5, 0.001)}
    reason = scaling.scaled_reason(["lr_schedules.seeds"], more, "many", rates)
    assert "this run does about 2x the work of the book's settings" in reason
    assert "would take" not in reason


def test_seeds_added_to_the_books_bear_on_no_claim_fewer_or_other_ones_do():
    """A run of every seed of the book's and more judges what the book preset judges, with more
    data (the 5 seeds that let the lr-schedule train losses fail): its claims read no scale."""
    claim = {"id": "c", "kind": "measurement", "depends_on": ["lr_schedules.seeds"]}
    for seeds, bears in (([0, 1, 2, 3, 4], False), ([0, 1], True), ([0, 1, 5], True)):
        change = ("lr_schedules.seeds", [0, 1, 2], seeds)
        assert (change in scaling.bearing_on(claim, [change])) == bears, seeds
        reason = scaling.scaled_reason(
            claim["depends_on"], scaling.bearing_on(claim, [change]), "p", {}
        )
        assert bool(reason) == bears, seeds


def test_an_entry_added_beside_the_books_bears_only_on_a_claim_that_names_it():
    """A setting or run added to a sweep runs more and changes none of the book's runs."""
    added = ("airfoil.settings.momentum.lr0.03_m0.5", settings.NOT_IN_BOOK, {"lr": 0.03})
    fewer = ("airfoil.seeds", list(range(20)), [0])
    claim = {"depends_on": ["airfoil.settings", "airfoil.seeds"]}
    assert scaling.bearing_on(claim, [added, fewer]) == [fewer]
    named = {"depends_on": ["airfoil.settings.momentum.lr0.03_m0.5"]}
    assert scaling.bearing_on(named, [added]) == [added]


def test_a_change_given_with_config_is_said_to_be_so_and_judged_without_it():
    reason = scaling.scaled_reason(["lr_schedules"], SCHEDULES, "book", {}, {"lr_schedules.seeds"})
    assert reason.startswith(
        f"{scaling.SCALED_REASON}: preset book and --config or --configfile scaled"
    )
    # the book preset would still run what was given beside it
    assert reason.endswith(f"({scaling.OVERRIDE_JUDGES})")
    reason = scaling.scaled_reason(["lr_schedules"], SCHEDULES, "cpu", {})
    assert reason.endswith(f"({scaling.BOOK_SCALE_JUDGES})")
    every = {key for key, _, _ in SCHEDULES}
    reason = scaling.scaled_reason(["lr_schedules"], SCHEDULES, "book", {}, every)
    assert reason.startswith(f"{scaling.SCALED_REASON}: --config or --configfile scaled")
    assert reason.endswith(f"({scaling.OVERRIDE_JUDGES})")


def test_a_run_the_preset_left_out_is_named_as_left_out_and_not_estimated():
    left_out = [("data_parallel.runs.resnet18_b256.2", {"model": "resnet18"}, scaling.LEFT_OUT)]
    rates = {"data_parallel.runs.resnet18.2": scaling.Rate(1000.0, 0.06)}
    reason = scaling.scaled_reason(["data_parallel.runs.resnet18_b256.2"], left_out, "smoke", rates)
    assert reason.startswith(
        f"{scaling.SCALED_REASON}: preset smoke left out data_parallel.runs.resnet18_b256.2;"
        " no job of this run ran data_parallel.runs.resnet18_b256.2, so no book-scale time"
        " is estimated"
    )
    # beside a scaled run that trained, the estimate covers that run only, and says so
    both = [*left_out, ("data_parallel.runs.resnet18.2.epochs", 10, 1)]
    reason = scaling.scaled_reason(["data_parallel.runs"], both, "smoke", rates)
    assert (
        "preset smoke scaled data_parallel.runs.resnet18.2.epochs = 1 (book: 10) and left" in reason
    )
    assert "would take about 10 min here" in reason  # 60 s x 10 epochs / 1
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
        ("hyb.batch64.eager_over_compile", True),  # a batch size dropped from a list
        ("hyb.batch6.eager_over_compile", False),
        ("hyb.batch1.eager_over_compile", False),  # kept
        ("hyb.batch.64.x", False),  # a number alone names no dropped value
        ("hyb.batch640.x", False),
        ("hyb.batch064.x", False),
        ("warmup.lr1.test_acc", False),  # seed 1 was dropped: lr1 names no seed
        ("warmup.seed1.test_acc", True),
        ("flags.on1.x", False),  # True dropped from a list is no number
    ],
)
def test_a_missing_metric_is_explained_only_by_what_the_preset_left_out(metric, named):
    deviations = [
        ("data_parallel.runs.resnet18_b256.2", {"model": "resnet18"}, scaling.LEFT_OUT),
        ("lr_schedules.semantics", ["as_written", "intended"], ["as_written"]),
        ("lr_schedules.epochs", 30, 6),
        ("hybridize.batch_sizes", [1, 64, 1024], [1, 1024]),
        ("warmup_sweep.seeds", [0, 1, 2], [0]),
        ("flags.on", [True, False], [False]),
    ]
    depends_on = ["data_parallel.runs", "lr_schedules.semantics", "lr_schedules.epochs"]
    depends_on += ["hybridize.batch_sizes", "warmup_sweep.seeds", "flags.on"]
    assert scaling.names_left_out(metric, depends_on, deviations) is named
    # a claim that does not depend on what was left out is not excused
    assert not scaling.names_left_out(metric, ["lr_schedules.epochs"], deviations)


def test_the_book_scale_time_of_several_claims_counts_each_family_once():
    """Claims that share a family of runs share its time: the total adds up the distinct
    families, never the claims' estimates."""
    rates = {"lrs": scaling.Rate(3000.0, 0.001), "dp.runs.a": scaling.Rate(1000.0, 0.002)}
    deviations = [("lrs.train_subset", None, 3000), ("dp.runs.a.epochs", 10, 1)]
    one = scaling.book_seconds(["lrs"], deviations, rates)
    assert one == {"lrs": 3000.0 * 20 * 0.001}  # 60,000 examples where it trained 3,000
    both = scaling.book_seconds(["lrs", "dp.runs.a"], deviations, rates)
    assert both == one | {"dp.runs.a": 1000.0 * 10 * 0.002}
    assert scaling.book_total([one, one, both]) == 60.0 + 20.0
    assert scaling.book_seconds(["other"], deviations, rates) == {}


def test_a_check_its_seeds_cannot_settle_names_the_seeds_that_would_and_their_time():
    """Three seeds of 5 schedules trained 15 runs of 90 s: the 2 more seeds that 3 editions
    need retrain them all twice more, 15 min. Only an out-of-reach ``typical`` check of a claim
    that depends on a seeds setting says so."""
    from d2lrepro.pipeline.checks import Outcome

    claim = {
        "evidence": "results/optimization/lr_schedules/metrics.csv",
        "depends_on": ["lr_schedules.epochs", "lr_schedules.seeds"],
        "checks": [
            {"kind": "below", "metric": "gap", "bound": 0.1},
            {"kind": "typical", "metric": "loss", "low": 0.1, "high": 0.2, "editions": 3},
        ],
    }
    missed = [Outcome("gap", True), Outcome("loss", False, out_of_reach=True)]
    rates = {"lr_schedules": scaling.Rate(15 * 90_000.0, 0.001), "warmup_sweep": scaling.Rate(1, 9)}
    said = scaling.settled_by(claim, missed, {"loss_runs": 3.0}, rates)
    assert said == (
        "; add seeds to lr_schedules.seeds in a config file given with --configfile (3 in this"
        " run; from 5, a window beyond every seed is a finding; about 15 min more training"
        " here, one run after another at this run's rates)"
    )
    assert scaling.settled_by(claim, missed, {"loss_runs": 3.0}, {}).endswith("is a finding)")
    within = [Outcome("gap", True), Outcome("loss", False, within_noise=True)]
    assert scaling.settled_by(claim, within, {"loss_runs": 3.0}, rates) == ""
    no_seeds = claim | {"depends_on": ["lr_schedules.epochs"]}
    assert scaling.settled_by(no_seeds, missed, {"loss_runs": 3.0}, rates) == ""
    # seeds of another experiment are not where its runs' count comes from
    others = claim | {"depends_on": ["warmup_sweep.seeds"]}
    assert scaling.settled_by(others, missed, {"loss_runs": 3.0}, rates) == ""


def test_a_duration_reads_in_the_unit_a_reader_would_use():
    assert [scaling.duration(t) for t in (45, 1800, 184_000)] == ["45 s", "30 min", "51 h"]


# The cpu preset's deviations of the data-parallel runs: one seed where the book has three.
DATA_PARALLEL = [
    ("data_parallel.seeds", [0, 1, 2], [0]),
    ("data_parallel.runs.resnet18.1.epochs", 10, 1),
    ("data_parallel.runs.lenet.1.epochs", 10, 2),
    ("hybridize.n_calls", 1000, 100),
]


def test_a_claim_judged_beside_a_change_of_its_experiment_names_it():
    """mgpu.1gpu depends on the LeNet run: scaled, it is not judged (scaled_reason); judged on
    one seed where the book's preset has three, it says so, and a change of another network's
    run or of another experiment is not its own."""
    claim = {
        "evidence": "results/multidevice/data_parallel/metrics.csv",
        "depends_on": ["data_parallel.runs.lenet.1"],
    }
    assert scaling.judged_at_scale(claim, DATA_PARALLEL) == (
        "data_parallel.seeds = [0] (book: [0, 1, 2])"
    )
    assert scaling.judged_at_scale(claim, DATA_PARALLEL[2:]) == ""
    # A claim that depends on the seeds is scaled by them, not judged beside them.
    no_seeds = claim | {"depends_on": ["data_parallel.runs.lenet.1", "data_parallel.seeds"]}
    assert scaling.judged_at_scale(no_seeds, DATA_PARALLEL) == ""
    # A printed output is the same at any scale.
    assert scaling.judged_at_scale(claim | {"kind": "output"}, DATA_PARALLEL) == ""
    # The cost model of LeNet beside a scaled ResNet-18 one.
    cost = {"evidence": "results/multidevice/cost_model/metrics.csv"}
    resnet = [("cost_model.resnet18.batches", [16, 32], [2, 4])]
    assert scaling.judged_at_scale(cost | {"depends_on": ["cost_model.lenet_ddp"]}, resnet) == ""


def test_an_experiment_is_the_folder_of_its_evidence():
    assert scaling.experiment_of("results/multidevice/data_parallel/metrics.csv") == (
        "data_parallel"
    )
    assert scaling.experiment_of("results/data/metrics.csv") == "data"
