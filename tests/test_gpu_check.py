"""The GPU check (tests/gpu_check.py) where no GPU is needed: its plan, bound to the workflow's
rules, the worker's command line and the config; its parts' limits and records; its summary;
and a whole check of fake parts on a machine that pretends to have a GPU."""

import csv
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

import gpu_check
from conftest import OUTPUTS, REPO
from d2lrepro.core import devices, fetch
from d2lrepro.multidevice.parts import launcher, worker

SCRIPT = REPO / "tests" / "gpu_check.py"
H200 = {
    "host": "vm",
    "cpu_model": "Intel(R) Xeon(R) Processor",
    "usable_cores": 16,
    "torch_version": "2.11.0+cu130",
    "python_version": "3.12.3",
    "cuda_version": "13.0",
    "gpus": ["NVIDIA H200"],
    "gpu_memory_mib": [143155],
}
ROW = (
    "| 2026-11-26 | 1 × NVIDIA H200, 16-core Intel(R) Xeon(R) Processor, torch 2.11.0+cu130"
    " | `658a16c` |"
)


def check(*args, **env):
    return subprocess.run(
        [sys.executable, SCRIPT, *map(str, args)],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_cuda_it_stops_at_once_and_writes_nothing(tmp_path):
    done = check("--out-dir", tmp_path, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2 and "no CUDA device" in done.stderr
    assert not any(tmp_path.iterdir())


def test_the_dry_run_prints_each_part_s_command_and_runs_nothing(tmp_path):
    done = check("--dry-run", "--out-dir", tmp_path, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 0, done.stderr
    assert "-m pytest -m cuda" in done.stdout
    assert "-m d2lrepro.multidevice.parts.worker --model resnet18 --batch-size 256" in done.stdout
    assert f"-m snakemake {' '.join(gpu_check.GPU_RULES)} " in done.stdout
    assert "--config preset=cpu" in done.stdout
    assert not any(tmp_path.iterdir())


def test_the_whole_preset_runs_first_every_rule_fetching_its_own_data_then_the_cuda_tests(
    tmp_path,
):
    done = check("--dry-run", "--whole-preset", "--mirror", tmp_path, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 0, done.stderr
    assert "Fashion-MNIST" not in done.stdout and "parts.worker" not in done.stdout
    preset, tests = gpu_check.plan(tmp_path, tmp_path, tmp_path, 1, whole=True)
    assert (preset.name, preset.limit, tests.name) == (gpu_check.WHOLE_RUN, 390, "`pytest -m cuda`")
    after = preset.command[preset.command.index("snakemake") + 1 :]
    assert after[:2] == ["--cores", "all"]  # no targets: the whole workflow
    assert f"data_mirror={tmp_path}" in after and "preset=cpu" in after
    assert gpu_check.WHOLE_S + tests.limit + 2 * gpu_check.GRACE_S <= gpu_check.WHOLE_TOTAL_S
    assert "in at most 570 s" in done.stdout


def test_the_experiments_are_every_rule_whose_jobs_lock_a_gpu():
    """A rule that asks for GPUs of its own (``gpus=``) is run by the check: a new one is not
    left out unseen."""
    locking = set()
    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        for block in re.split(r"^rule ", path.read_text(), flags=re.M)[1:]:
            if "gpus=" in block:
                locking.add(block.split(":", 1)[0])
    assert locking == set(gpu_check.GPU_RULES) | {"data_parallel_run"}


@pytest.mark.parametrize("gpus, with_two_devices", [(1, False), (2, True)])
def test_the_data_parallel_runs_are_those_the_gpus_hold(gpus, with_two_devices):
    targets = gpu_check.data_parallel_targets(gpus)
    run = "results/multidevice/data_parallel/{}.seed0.csv"
    assert run.format("lenet.1") in targets and run.format("resnet18.1") in targets
    assert (run.format("lenet.2") in targets) == with_two_devices


def test_the_resnet_part_is_the_book_s_one_device_run_on_all_the_data(tmp_path):
    part = gpu_check.plan(tmp_path, tmp_path, None, 1)[1]
    args = worker.parse_args(part.command[part.command.index("--model") :])
    book = yaml.safe_load((REPO / "config.yaml").read_text())["data_parallel"]["runs"]
    run = book["resnet18.1"]
    assert (args.model, args.batch_size, args.lr) == (run["model"], run["batch_size"], run["lr"])
    assert args.train_subset is None and args.test_subset is None
    assert args.data == tmp_path / gpu_check.FASHION_MNIST


def test_the_shared_part_is_the_book_s_two_device_run_with_its_workers_on_one_gpu(
    tmp_path, monkeypatch
):
    """As the workflow runs a 2-device run on a machine with one GPU: the worker under torchrun
    (launcher.torchrun_argv), 2 workers allowed to share the GPU, only the first of the GPUs
    visible, the job's 2 threads; its result is read from the history it writes."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    part = gpu_check.plan(tmp_path, tmp_path, None, 2)[2]
    at = part.command.index("--model")
    args = worker.parse_args(part.command[at:])
    run = yaml.safe_load((REPO / "config.yaml").read_text())["data_parallel"]["runs"]["resnet18.2"]
    assert (args.model, args.batch_size, args.lr) == (run["model"], run["batch_size"], run["lr"])
    assert args.train_subset is None and args.test_subset is None
    assert part.command[1:3] == ["-m", "torch.distributed.run"]
    assert part.command[3:] == launcher.torchrun_argv(worker, 2, part.command[at:])
    assert part.env == {
        devices.SHARE_GPUS: "1",
        "CUDA_VISIBLE_DEVICES": "3",
        "OMP_NUM_THREADS": "2",
    }
    history = "epoch,seconds,samples_per_s,steady_samples_per_s,test_acc\n1,9.5,6315.8,7400.2,0.8\n"
    (tmp_path / args.out.name).write_text(history)
    assert args.out.parent == tmp_path and part.result(tmp_path).startswith("epoch 1: 9.50 s")


def test_a_part_runs_with_the_variables_it_sets_and_its_log_shows_them(tmp_path):
    code = "import os; print('sees', os.environ['GPU_CHECK_SET'])"
    part = a_part(tmp_path, code)
    part.env = {"GPU_CHECK_SET": "yes"}
    outcome = gpu_check.run_part(part, tmp_path, time.monotonic() + 60, dict(os.environ))
    assert outcome.status == gpu_check.OK
    log = (tmp_path / "p.log").read_text()
    assert log.startswith("$ GPU_CHECK_SET=yes ") and "sees yes" in log


def test_snakemake_plans_the_experiments_as_the_check_runs_them(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(REPO, copy, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    part = gpu_check.plan(copy, tmp_path, None, 1)[-1]
    done = subprocess.run(
        [*part.command, "-n"], cwd=part.cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for rule in (*gpu_check.GPU_RULES, "data_parallel_run"):
        assert re.search(rf"^rule {rule}:", done.stdout + done.stderr, re.M), rule


def test_the_data_lands_where_snakemake_s_data_rules_put_it(tmp_path, mirror):
    outcome = gpu_check.prepare_data(tmp_path, mirror)
    assert outcome.status == gpu_check.OK
    assert (tmp_path / gpu_check.FASHION_MNIST).exists()
    assert (tmp_path / "resources/fashion-mnist/train-images-idx3-ubyte.gz").exists()


def test_data_that_cannot_be_fetched_is_recorded(tmp_path, monkeypatch):
    def refuse(spec, dest, mirrors):
        raise fetch.FetchError(f"could not fetch {spec.name}")

    monkeypatch.setattr(fetch, "fetch", refuse)
    outcome = gpu_check.prepare_data(tmp_path, None)
    assert outcome.status.startswith("failed: could not fetch train-images")


def a_part(tmp_path, code, limit=30, needs="json"):
    command = [sys.executable, "-c", code]
    return gpu_check.Part("p", command, tmp_path, "p.log", limit, needs, lambda out: "")


def test_a_part_that_fails_is_recorded_with_its_exit_code_and_log(tmp_path):
    part = a_part(tmp_path, "import sys; print('went wrong'); sys.exit(3)")
    outcome = gpu_check.run_part(part, tmp_path, time.monotonic() + 60, dict(os.environ))
    assert outcome.status == "failed (exit 3)"
    assert "went wrong" in (tmp_path / "p.log").read_text()


def test_a_part_over_its_limit_is_stopped_with_the_processes_it_started(tmp_path):
    # A shell, not Python, so that the child is started well within the limit on a busy machine.
    script = "sleep 60 & echo $! > child.pid; sleep 60"
    part = gpu_check.Part("p", ["sh", "-c", script], tmp_path, "p.log", 2, "json", lambda out: "")
    start = time.monotonic()
    outcome = gpu_check.run_part(part, tmp_path, time.monotonic() + 60, dict(os.environ))
    assert outcome.status.startswith("stopped at its 2 s limit; ended ")
    assert outcome.status.endswith(" s after SIGTERM") and time.monotonic() - start < 10
    stat = f"/proc/{(tmp_path / 'child.pid').read_text()}/stat"
    assert not os.path.exists(stat) or open(stat).read().split()[2] == "Z"  # ended


def test_a_part_that_outlives_its_sigterm_is_killed_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "GRACE_S", 1)
    part = gpu_check.Part(
        "p", ["sh", "-c", "trap '' TERM; sleep 60"], tmp_path, "p.log", 1, "json", lambda out: ""
    )
    outcome = gpu_check.run_part(part, tmp_path, time.monotonic() + 60, dict(os.environ))
    assert outcome.status == "stopped at its 1 s limit; killed, still running 1 s after SIGTERM"


def test_a_part_without_its_module_or_time_is_skipped(tmp_path):
    env, later = dict(os.environ), time.monotonic() + 60
    missing = gpu_check.run_part(a_part(tmp_path, "", needs="no_such_module"), tmp_path, later, env)
    assert missing.status.startswith("skipped: no no_such_module in ")
    late = gpu_check.run_part(a_part(tmp_path, ""), tmp_path, time.monotonic(), env)
    assert late.status == f"skipped: no time left of {gpu_check.TOTAL_S} s"


def test_each_part_s_result_is_read_from_what_it_wrote(tmp_path):
    (tmp_path / "pytest.log").write_text(
        "tests/x.py::test_a PASSED\n"
        "= 2 failed, 14 passed, 8 skipped, 1138 deselected, 2 errors in 116.76s (0:01:56) =\n"
    )
    assert gpu_check.pytest_tally(tmp_path) == (
        "2 failed, 14 passed, 8 skipped, 1138 deselected, 2 errors in 116.76s (0:01:56)"
    )
    (tmp_path / "snakemake.log").write_text(
        "77 of 85 steps (91%) done\nExecute 1 jobs...\n78 of 85 steps (92%) done\n"
    )
    assert gpu_check.snakemake_steps(tmp_path) == "78 of 85 steps done"
    # the lines of Snakemake's start and of its first job, as its log writes them
    (tmp_path / "snakemake.log").write_text(
        "SNAKEMAKE\n=========\n  Date: 2026-11-27 22:12:06\n  Workflow ID: d\n"
        "Execute 13 jobs...\n\n[Fri Nov 27 22:12:13 2026]\nlocalrule hybridize_first_compile:\n"
        "[Fri Nov 27 22:12:19 2026]\n78 of 85 steps (92%) done\n"
    )
    assert gpu_check.snakemake_steps(tmp_path) == (
        "78 of 85 steps done; the first job 7 s after Snakemake's start"
    )
    # a day of one digit, as time.asctime pads it, the night between
    (tmp_path / "snakemake.log").write_text(
        "  Date: 2026-10-31 23:59:50\n[Sun Nov  1 00:00:03 2026]\n78 of 85 steps (92%) done\n"
    )
    assert gpu_check.snakemake_steps(tmp_path) == (
        "78 of 85 steps done; the first job 13 s after Snakemake's start"
    )
    refused = "RuntimeError: the job server runs 2 threads (python, jemalloc_bg_thd); it may"
    refused += " fork only one"
    with open(tmp_path / "snakemake.log", "a") as log:
        log.write(f"job server not started ({refused}): each job starts its own Python (log: x)\n")
    assert gpu_check.snakemake_steps(tmp_path) == (
        f"78 of 85 steps done; the first job 13 s after Snakemake's start; job server not started:"
        f" {refused}"
    )
    columns = ["epoch", "seconds", "samples_per_s", "steady_samples_per_s", "test_acc"]
    epochs = [[1, 9.5, 6315.8, 7400.2, 0.8012], [2, 8.0, 7500, 7520, 0.85]]
    with open(tmp_path / "resnet18.csv", "w", newline="") as f:
        csv.writer(f).writerows([columns, *epochs])
    assert gpu_check.resnet_epochs(tmp_path) == (
        "epoch 1: 9.50 s, 6,316 images/s (7,400 from its second batch), test accuracy 0.801;"
        " epoch 2: 8.00 s, 7,500 images/s (7,520 from its second batch), test accuracy 0.850"
    )


def test_the_summary_gives_each_part_a_row_of_the_timings_table():
    outcomes = [
        gpu_check.Outcome("Fashion-MNIST fetched and prepared", None, gpu_check.OK, 2.4),
        gpu_check.Outcome("`pytest -m cuda`", 150, "failed (exit 1)", 121.2, "2 failed in 117s"),
        gpu_check.Outcome(gpu_check.RESNET_PART, 90, gpu_check.OK, 31.0, "epoch 1: 9.50 s"),
        gpu_check.Outcome(gpu_check.GPU_RUNS, 300, "stopped at its 300 s limit", 315, "7 of 8"),
    ]
    jobs = [("hybridize", 98.06), ("autopar", 45.28)]
    text = gpu_check.summary(H200, "658a16c", "2026-11-26", outcomes, jobs, 470.4)
    assert f"{ROW} Fashion-MNIST fetched and prepared | 2 s | ok |" in text
    assert f"{ROW} `pytest -m cuda` | 2 min 01 s | failed (exit 1); 2 failed in 117s |" in text
    assert f"{ROW} {gpu_check.RESNET_PART} | 31 s | epoch 1: 9.50 s |" in text
    assert f"{ROW} {gpu_check.GPU_RUNS} | 5 min 15 s | stopped at its 300 s limit; 7 of 8 |" in text
    assert f"{ROW} `tests/gpu_check.py`, the whole check | 7 min 50 s | 2 of 4 parts ok |" in text
    assert "| hybridize | 98.06 |" in text and "| 2 jobs | 143.34 |" in text
    assert "GPU memory 140 GiB; CUDA 13.0" in text
    assert "compiles went" not in text  # none ran
    phases = ["hyb.batch1 on cpu: torch.compile's phases: compile_file 40.1 s"]
    text = gpu_check.summary(H200, "658a16c", "2026-11-26", outcomes, jobs, 470.4, 540, phases)
    assert text.endswith("went (the jobs' logs)\n\n- " + phases[0] + "\n")


def test_the_compiles_phases_are_read_from_the_compile_jobs_logs(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/hybridize.log").write_text(
        "2026-11-27 20:17:37,649 INFO d2lrepro.performance.hybridize: hyb.batch1 on cpu:"
        " torch.compile's phases: _compile.compile_inner 3.3 s\n"
        "2026-11-27 20:17:38,000 INFO d2lrepro.performance.hybridize: hyb.batch1 on cpu: the"
        " modes timed in 9.0 s\n"
        "2026-11-27 20:17:48,815 INFO d2lrepro.performance.hybridize: hyb.cuda.batch1 on"
        " cuda:0: torch.compile's phases: none took 0.5 s\n"
    )
    (tmp_path / "logs/hybridize_first_compile.log").write_text(
        "2026-11-27 20:17:32,335 INFO d2lrepro: the first torch.compile of this machine:"
        " {'seconds': 9.765, 'phases': 'compile_file 7.2 s'}\n"
    )
    assert gpu_check.compile_phases(tmp_path) == [
        "the first torch.compile of this machine: {'seconds': 9.765, 'phases': 'compile_file"
        " 7.2 s'}",
        "hyb.batch1 on cpu: torch.compile's phases: _compile.compile_inner 3.3 s",
        "hyb.cuda.batch1 on cuda:0: torch.compile's phases: none took 0.5 s",
    ]
    assert gpu_check.compile_phases(tmp_path / "nothing") == []


def test_a_whole_check_records_every_part_in_one_folder(tmp_path, monkeypatch):
    """On a machine that pretends to have a GPU, with fake parts: the first fails, the second
    still runs and measures; one folder holds the logs, the measurements and the summary."""
    measures = (
        "from pathlib import Path\n"
        "Path('results/performance/x').mkdir(parents=True)\n"
        "Path('results/performance/x/metrics.csv').write_text('metric,value\\n')\n"
        "Path('benchmarks').mkdir()\n"
        "Path('benchmarks/x.tsv').write_text('s\\th:m:s\\n12.5\\t0:00:12\\n')"
    )

    def fake_plan(scratch, out, mirror, gpus, whole):
        fails = a_part(scratch, "import sys; sys.exit(1)")
        ends = a_part(scratch, measures)
        ends.name, ends.log, ends.result = "q", "q.log", lambda out: "measured"
        return [fails, ends]

    monkeypatch.setattr(gpu_check.settings, "local_gpus", lambda: 1)
    monkeypatch.setattr(gpu_check.environment, "describe", lambda **kwargs: H200)
    prepared = gpu_check.Outcome("data", None, gpu_check.OK, 0.1)
    monkeypatch.setattr(gpu_check, "prepare_data", lambda scratch, mirror: prepared)
    monkeypatch.setattr(gpu_check, "plan", fake_plan)
    assert gpu_check.main(["--out-dir", str(tmp_path)]) == 1
    (folder,) = tmp_path.iterdir()
    assert re.fullmatch(r"gpu-check-vm-\d{4}-\d\d-\d\d-[0-9a-f]{6}", folder.name)
    assert (folder / "results/performance/x/metrics.csv").exists()
    assert (folder / "job-seconds.tsv").read_text() == "job\tseconds\nx\t12.50\n"
    assert {"p.log", "q.log", "machine.json", "summary.md"} <= {p.name for p in folder.iterdir()}
    summary = (folder / "summary.md").read_text()
    assert "| p | 0 s | failed (exit 1) |" in summary and "| q | 0 s | measured |" in summary


def test_the_whole_preset_fetches_its_own_data_and_its_verdicts_are_kept(tmp_path, monkeypatch):
    judges = "from pathlib import Path\nPath('results').mkdir()\n"
    judges += "Path('results/claims.csv').write_text('id,verdict\\na,reproduced\\nb,reproduced\\n')"
    planned = []

    def fake_plan(scratch, out, mirror, gpus, whole):
        planned.append(whole)
        return [a_part(scratch, judges)]

    def no_data(scratch, mirror):
        raise AssertionError("the whole preset prepares its own data")

    monkeypatch.setattr(gpu_check.settings, "local_gpus", lambda: 1)
    monkeypatch.setattr(gpu_check.environment, "describe", lambda **kwargs: H200)
    monkeypatch.setattr(gpu_check, "prepare_data", no_data)
    monkeypatch.setattr(gpu_check, "plan", fake_plan)
    assert gpu_check.main(["--whole-preset", "--out-dir", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    assert planned == [True] and (folder / "claims.csv").exists()
    assert "| p | 0 s | 2 claims: 2 reproduced |" in (folder / "summary.md").read_text()
