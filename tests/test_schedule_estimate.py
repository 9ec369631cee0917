"""The schedule estimate (tests/schedule_estimate.py): its simulation on tiny synthetic plans,
jobs forked from the job server, the job times it reads, and the plan it takes from a dry run
of the workflow."""

import subprocess

import pytest

import schedule_estimate
from schedule_estimate import Job, estimated, forked, less, simulate

CORES = {"_cores": 2, "gpu": None, "gpu_share": None}


def one_core(name, *after, rule="r"):
    return Job(name, rule, {"_cores": 1}, after)


def test_jobs_run_side_by_side_as_far_as_the_cores_go():
    jobs = [one_core("a"), one_core("b"), one_core("c")]
    assert simulate(jobs, [3.0, 2.0, 2.0], CORES) == 4.0  # a and b, then c beside a
    assert simulate(jobs, [3.0, 2.0, 2.0], CORES | {"_cores": 1}) == 7.0


def test_a_job_waits_for_the_jobs_it_depends_on():
    jobs = [one_core("data"), one_core("train", 0), one_core("summary", 1), one_core("plot")]
    assert simulate(jobs, [1.0, 5.0, 1.0, 4.0], CORES) == 7.0


def test_a_job_that_takes_every_core_waits_for_a_free_machine_and_runs_alone():
    """The timing job does not fit beside a, so it starts when a ends; b, ready then too,
    comes after it in the plan's order and waits for it to end: 1 + 2 + 1 s, where b beside
    the timing job would make 3 s."""
    timing = Job("timing", "t", {"_cores": 16})  # asks for more than there is: capped
    jobs = [one_core("a"), timing, one_core("b", 0)]
    assert simulate(jobs, [1.0, 2.0, 1.0], CORES) == 4.0


def test_jobs_that_share_a_gpu_run_as_many_at_once_as_there_are_shares():
    shared = [Job(f"lr{i}", "lr", {"_cores": 1, "gpu_share": 1}) for i in range(4)]
    machine = {"_cores": 16, "gpu": 1, "gpu_share": 2}
    assert simulate(shared, [10.0] * 4, machine) == 20.0
    on_the_gpu = Job("hybridize", "h", {"_cores": 1, "gpu": 1})
    assert simulate([on_the_gpu, on_the_gpu], [5.0, 5.0], machine) == 10.0
    # without GPUs (limit 0) a job asks for none
    assert simulate([on_the_gpu] * 2, [5.0] * 2, machine | {"gpu": 0}) == 5.0


def test_a_plan_that_cannot_finish_says_which_jobs_wait():
    with pytest.raises(ValueError, match="'a', 'b'"):
        simulate([one_core("a", 1), one_core("b", 0)], [1.0, 1.0], CORES)


def test_a_forked_job_saves_the_imports_but_not_its_hand_over_and_a_light_job_nothing():
    light = Job("x2", "x", {"_cores": 1}, light=True)
    jobs = [light, one_core("x1", rule="x"), one_core("y", rule="y")]
    assert forked(jobs, [0.5, 10.0, 1.0], imports=1.5) == [0.5, 8.5, schedule_estimate.HAND_OVER]


def test_less_takes_the_seconds_a_change_saves_off_a_measured_job_only():
    times = {"hybridize": 104.0, "hardware": 66.0}
    assert less(times, [("hybridize", "38"), ("hardware", "70")]) == {
        "hybridize": 66.0,
        "hardware": 0.0,
    }
    assert times["hybridize"] == 104.0
    with pytest.raises(ValueError, match="--less hybrid: no time measured"):
        less(times, [("hybrid", "1")])


def test_a_light_job_takes_the_light_time_only_where_its_times_come_from_an_older_plan():
    jobs = [
        Job("x2", "x", {"_cores": 1}, light=True),
        Job("single_process", "single_process", {"_cores": 1}, light=True),
        one_core("y"),
    ]
    times = {"x2": 8.0, "single_process": 3.0, "y": 2.0}
    assert estimated(jobs, times, light_seconds=0.5) == [0.5, 3.0, 2.0]
    assert estimated(jobs, times, light_seconds=None) == [8.0, 3.0, 2.0]


def test_job_times_come_from_a_benchmarks_folder_or_a_table(tmp_path):
    folder = tmp_path / "benchmarks"
    (folder / "data_parallel_run").mkdir(parents=True)
    (folder / "hybridize.tsv").write_text("s\th:m:s\n98.06\t0:01:38\n")
    (folder / "data_parallel_run" / "lenet.1.seed0.tsv").write_text("s\th:m:s\n13.48\t0:00:13\n")
    found = {"hybridize": 98.06, "data_parallel_run/lenet.1.seed0": 13.48}
    assert schedule_estimate.measured(folder) == found
    table = tmp_path / "job-seconds.tsv"
    table.write_text("job\tseconds\nhybridize\t98.06\ndata_parallel_run/lenet.1.seed0\t13.48\n")
    assert schedule_estimate.measured(table) == found


def test_the_plan_is_the_workflow_s_own_on_the_machine_named():
    """A dry run as a machine of 4 cores and 1 GPU: a job that times takes every core and the
    GPU, the lr-schedule runs a share of it, and each waits for the prepared data."""
    limits, jobs = schedule_estimate.plan("cpu", 4, 1)
    assert limits == {"_cores": 4, "gpu": 1, "gpu_share": 4}
    named = {job.name: job for job in jobs}
    assert named["hybridize"].needs == {"_cores": 4, "gpu": 1}
    run = named["lr_schedules_run/constant.as_written.seed0"]
    assert run.needs == {"_cores": 1, "gpu": 0, "gpu_share": 1}
    assert [jobs[i].rule for i in run.after] == ["prepare_fashion_mnist"]
    # on one GPU the 2-device runs' 2 workers share it, a core each; one job trains every
    # airfoil setting
    shared = named["data_parallel_run/lenet.2.seed0"]
    assert not shared.light and shared.needs == {"_cores": 2, "gpu": 0, "gpu_share": 1}
    assert named["airfoil_run"].needs == {"_cores": 4, "gpu": 0}


def test_a_job_doing_the_work_of_several_measured_ones_pays_their_start_up_once():
    times = {"airfoil_run/setting~a": 5.0, "airfoil_run/setting~b": 4.0, "hybridize": 98.0}
    assert schedule_estimate.job_time(one_core("airfoil_run"), times) == 5.0
    assert schedule_estimate.job_time(one_core("hybridize"), times) == 98.0
    assert schedule_estimate.job_time(one_core("report"), times) == 0.0


def test_the_gpu_run_is_planned_by_the_commit_that_ran_it():
    """That commit's tree predates the modules this tree's planning patches: it plans all the
    same, its 2-device runs holding the machine like every other job that takes a GPU."""
    known = subprocess.run(
        ["git", "-C", str(schedule_estimate.REPO), "cat-file", "-e", schedule_estimate.H200_COMMIT],
        capture_output=True,
    )
    if known.returncode:
        pytest.skip(f"{schedule_estimate.H200_COMMIT} is not in this clone's history")
    limits, jobs = schedule_estimate.plan("cpu", 16, 1, schedule_estimate.H200_COMMIT)
    named = {job.name: job for job in jobs}
    assert limits == {"_cores": 16, "gpu": 1, "gpu_share": 4}
    assert not any(job.light for job in jobs)
    assert named["data_parallel_run/lenet.2.seed0"].needs["_cores"] == 16


def test_an_estimate_from_a_run_of_this_tree_names_its_cuts_and_adds_no_job_server(
    monkeypatch, capsys
):
    """That run's jobs already forked from the job server: no saving is added for it unless
    --imports-seconds asks."""
    tsv = str(schedule_estimate.REPO / "docs/runs/h200-a029d33-job-seconds.tsv")
    args = ["--run", "H200", tsv, "cpu", "16", "1", "319", "--estimate-jobs", tsv]
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args, "--less", "hybridize", "38"])
    schedule_estimate.main()
    estimate = capsys.readouterr().out.splitlines()[-2]
    assert "hybridize 38 s shorter" in estimate
    assert "job server" not in estimate


def test_assume_times_only_a_job_the_run_did_not_reach():
    times = {"hybridize": 64.0}
    assumed = schedule_estimate.assume(times, [("autopar", "72")])
    assert assumed == {"hybridize": 64.0, "autopar": 72.0}
    assert times == {"hybridize": 64.0}
    with pytest.raises(ValueError, match="hybridize: the run measured it"):
        schedule_estimate.assume(times, [("hybridize", "140")])


def test_an_estimate_of_the_book_preset_from_a_run_stopped_part_way_names_what_it_assumed(
    monkeypatch, capsys
):
    """The book preset's run on the GPU box stopped before its timing jobs: the estimate plans
    the book preset, names each assumed time, and lists the jobs still without one."""
    runs = schedule_estimate.REPO / "docs/runs"
    cpu, book = runs / "h200-65c3da6-job-seconds.tsv", runs / "h200-65c3da6-book-job-seconds.tsv"
    args = ["--run", "H200", str(cpu), "cpu", "16", "1", "235", "--estimate-jobs", str(book)]
    args += ["--estimate-preset", "book", "--assume", "hybridize", "140"]
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args])
    schedule_estimate.main()
    estimate, unmeasured = capsys.readouterr().out.splitlines()[-2:]
    assert "the book preset" in estimate and "hybridize 140 s assumed" in estimate
    assert "autopar" in unmeasured and "hybridize" not in unmeasured
    # a seed the book preset plans and the cpu preset does not, stopped before its end
    assert "data_parallel_run/resnet18_momentum.1.seed1" in unmeasured


@pytest.mark.parametrize(
    "options, error",
    [
        (["--estimate-preset", "book"], "needs --estimate-jobs"),
        (["--assume", "hybridise", "140"], "--assume hybridise: the cpu preset plans no such"),
        (["--less", "hybridise", "38"], "--less hybridise: the cpu preset plans no such"),
    ],
)
def test_an_estimate_refuses_a_preset_without_its_times_and_a_job_it_does_not_plan(
    monkeypatch, capsys, options, error
):
    tsv = str(schedule_estimate.REPO / "docs/runs/h200-65c3da6-job-seconds.tsv")
    args = ["--run", "H200", tsv, "cpu", "4", "1", "235", "--estimate-jobs", tsv]
    if options[0] == "--estimate-preset":  # refused before any plan
        args = []
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args, *options])
    with pytest.raises(SystemExit) as stopped:
        schedule_estimate.main()
    assert error in f"{stopped.value.code} {capsys.readouterr().err}"


def test_a_job_that_trained_nothing_when_measured_is_one_this_tree_runs_in_full_only():
    then = [
        Job("dp/x.2", "dp", {"_cores": 1}, light=True),  # short of devices then
        Job("single_process", "single_process", {"_cores": 1}, light=True),  # light still
        Job("dp/x.1", "dp", {"_cores": 1}),
    ]
    now = [
        Job("dp/x.2", "dp", {"_cores": 2, "gpu_share": 1}),
        Job("single_process", "single_process", {"_cores": 1}, light=True),
        Job("dp/x.1", "dp", {"_cores": 1}, light=True),  # light now: its time is an upper one
    ]
    assert schedule_estimate.trained_nothing_then(then, now) == ["dp/x.2"]


def test_an_estimate_refuses_a_time_measured_by_a_plan_that_ran_the_job_light(
    monkeypatch, capsys, tmp_path
):
    """The measuring commit's plan ran the 2-device run light (0.4 s: it wrote "not applicable")
    and this tree trains it: the estimate stops and names it until --assume gives it a time."""
    machine = {"_cores": 16, "gpu": 1, "gpu_share": 4}
    then = [Job("dp/x.2", "dp", {"_cores": 1}, light=True), Job("dp/x.1", "dp", {"_cores": 1})]
    now = [Job(j.name, "dp", {"_cores": 2, "gpu_share": 1}) for j in then]
    planned = lambda preset, cores, gpus, commit="": (machine, then if commit else now)  # noqa: E731
    monkeypatch.setattr(schedule_estimate, "plan", planned)
    table = tmp_path / "times.tsv"
    table.write_text("job\tseconds\ndp/x.2\t0.4\ndp/x.1\t120\n")
    args = ["--run", "run", str(table), "book", "16", "1", "120", "--estimate-preset", "book"]
    args += ["--estimate-jobs", str(table), "--estimate-commit", "abc1234"]
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args])
    with pytest.raises(SystemExit) as stopped:
        schedule_estimate.main()
    assert "trained nothing in the run of abc1234" in str(stopped.value.code)
    assert str(stopped.value.code).endswith("--assume: dp/x.2")
    assumed = tmp_path / "assumed.tsv"
    assumed.write_text("job\tseconds\twhy\ndp/x.2\t130\tdp/x.1's time, without the all-reduces\n")
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args, "--assumed", str(assumed)])
    schedule_estimate.main()
    estimate = capsys.readouterr().out.splitlines()[-2]
    assert f"the assumed times of {assumed} (1 jobs)" in estimate
    assert estimate.endswith("130 s (2 min 10 s)")


def test_a_time_given_on_the_command_line_overrides_the_table_s_and_a_measured_one_is_refused(
    monkeypatch, capsys, tmp_path
):
    machine = {"_cores": 16, "gpu": 1, "gpu_share": 4}
    jobs = [Job("a", "a", {"_cores": 1}), Job("b", "b", {"_cores": 1})]
    monkeypatch.setattr(schedule_estimate, "plan", lambda *args: (machine, jobs))
    table, assumed = tmp_path / "times.tsv", tmp_path / "assumed.tsv"
    table.write_text("job\tseconds\na\t5\n")
    assumed.write_text("job\tseconds\twhy\nb\t7\tb's time elsewhere\n")
    args = ["--run", "run", str(table), "cpu", "16", "1", "5", "--estimate-jobs", str(table)]
    args += ["--assumed", str(assumed)]
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args, "--assume", "b", "9"])
    schedule_estimate.main()
    assert capsys.readouterr().out.splitlines()[-2].endswith("9 s (0 min 09 s)")
    assumed.write_text("job\tseconds\nb\t7\na\t1\n")  # a: measured, and no commit voids it
    monkeypatch.setattr("sys.argv", ["schedule_estimate.py", *args])
    with pytest.raises(SystemExit) as stopped:
        schedule_estimate.main()
    assert str(stopped.value.code).startswith("a: the run measured it (5 s); an assumed time")
