"""The workflow through the SLURM profile on a one-node SLURM brought up on this machine
(Debian's slurmctld, slurmd and munge; .ci/run installs them). Skipped, with the reason, where
they are missing or the tests cannot start daemons (not root)."""

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_workflow import OUTPUTS

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
# Outputs that depend on nothing but the code and the config.
DETERMINISTIC = ["results/data/fashion_mnist.pt", "results/data/airfoil.pt"]
# The rules that run in Snakemake's own process (downloads, verdicts, report); all others go
# to SLURM.
LOCAL_RULES = {"fetch_data", "evaluate_claims", "report", "all"}
TIMING_RULES = (
    "hybridize",
    "asynchrony",
    "autopar",
    "hardware",
    "multidevice_train",
    "multidevice_probes",
    "book_multigpu",
)
# Where every SLURM command looks without SLURM_CONF: the steps srun starts inside a job do.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")

pytestmark = pytest.mark.e2e


def _why_not() -> str:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "the SLURM executor plugin is not installed (pip install -e '.[slurm]')"
    missing = [d for d in DAEMONS if not (shutil.which(d) or Path("/usr/sbin", d).exists())]
    if missing:
        packages = "slurmctld slurmd slurm-client munge"
        return f"not installed: {', '.join(missing)} (apt-get install {packages})"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    if SYSTEM_CONF.exists():
        return f"{SYSTEM_CONF} exists: a SLURM is configured here, and the test leaves it alone"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def slurm(tmp_path):
    """A one-node SLURM cluster on this machine: its config path; the daemons stop after."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "cluster"
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    host, cpus = socket.gethostname().split(".")[0], os.cpu_count()
    conf = SYSTEM_CONF
    conf.parent.mkdir(exist_ok=True)
    conf.write_text(
        f"""ClusterName=test
SlurmctldHost={host}
SlurmUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=600
ReturnToService=2
NodeName={host} CPUs={cpus} RealMemory=16000 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    if subprocess.run(["munge", "-n"], capture_output=True).returncode:
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
        started.append(Path("/run/munge/munged.pid"))
    subprocess.run(["slurmctld", "-f", conf], check=True, env=env)
    subprocess.run(["slurmd", "-f", conf], check=True, env=env)
    started += [root / "slurmd.pid", root / "slurmctld.pid"]
    try:
        for _ in range(30):
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env
            )
            if state.stdout.strip() == "idle":
                break
            time.sleep(1)
        else:
            pytest.fail(f"the SLURM node never came up: {state.stdout}{state.stderr}")
        yield conf
    finally:
        for pid_file in started:
            if pid_file.exists():
                subprocess.run(["kill", pid_file.read_text().strip()])
        conf.unlink()


def test_the_smoke_preset_runs_through_sbatch(slurm, repo, mirror, tmp_path):
    """The whole smoke preset through the profile: every job of every rule but the local ones
    (downloads, verdicts, report) is a SLURM job that completed, and deterministic outputs
    equal a local run's."""
    cpus = str(os.cpu_count())
    threads = [f"{rule}={cpus}" for rule in TIMING_RULES]
    cluster = tmp_path / "slurm"
    done = _through_slurm(
        slurm, repo, mirror, cluster, [], "--slurm-keep-successful-logs", "--set-threads", *threads
    )
    assert done.returncode == 0, done.stderr[-4000:]
    said = done.stdout + done.stderr
    assert (cluster / "results" / "report.html").exists()
    local = tmp_path / "local"
    shutil.copytree(repo, local, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    command = [sys.executable, "-m", "snakemake", *DETERMINISTIC, "--cores", cpus]
    command += ["--config", "preset=smoke", f"data_mirror={mirror}"]
    done = subprocess.run(command, cwd=local, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    # The executor logs each job under its rule and SLURM job id; SLURM's completion log has
    # that job as completed.
    completed = {
        line.split()[0].removeprefix("JobId="): line
        for line in (tmp_path / "cluster" / "log" / "jobcomp.txt").read_text().splitlines()
    }
    slurm_logs = cluster / ".snakemake" / "slurm_logs"
    rules = {d.name.removeprefix("rule_") for d in slurm_logs.iterdir()}
    assert set(re.findall(r"^localrule (\w+):", said, re.M)) == LOCAL_RULES
    assert rules == set(re.findall(r"^rule (\w+):", said, re.M))
    assert {"lr_train", "hybridize", "multidevice_train", "multidevice_probes"} <= rules
    for rule in rules:
        job_ids = [log.stem for log in (slurm_logs / f"rule_{rule}").rglob("*.log")]
        assert all("JobState=COMPLETED" in completed[i] for i in job_ids), (rule, completed)
    for target in DETERMINISTIC:
        assert (cluster / target).read_bytes() == (local / target).read_bytes(), target


def _through_slurm(conf, repo, mirror, workdir, targets, *options, preset="smoke"):
    """Snakemake run of ``targets`` through the SLURM profile in a copy of the repository."""
    shutil.copytree(repo, workdir, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    command = [sys.executable, "-m", "snakemake", *targets, "--config", f"preset={preset}"]
    command += [f"data_mirror={mirror}", "--workflow-profile", "profiles/slurm"]
    command += ["--slurm-status-command", "squeue", "--slurm-no-account"]
    command += ["--slurm-init-seconds-before-status-checks", "2", *options]
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)


def test_a_partition_the_cluster_lacks_stops_with_the_rule_and_sbatchs_reason(
    slurm, repo, mirror, tmp_path
):
    done = _through_slurm(
        slurm,
        repo,
        mirror,
        tmp_path / "w",
        ["results/figures/intro/risk.png"],
        "--default-resources",
        "slurm_partition=nowhere",
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "intro" in said and "invalid partition" in said.lower(), said[-3000:]


def test_a_job_killed_for_time_names_its_rule_and_job_id_and_leaves_its_checkpoint(
    slurm, repo, mirror, tmp_path
):
    """The 1-device LeNet at the book's scale (minutes here) given a 1-minute limit: SLURM
    kills it after an epoch or two; the epochs done stay in its checkpoint, which a rerun
    resumes from (tests/test_multigpu_run.py checks the resumed result)."""
    workdir = tmp_path / "w"
    done = _through_slurm(
        slurm,
        repo,
        mirror,
        workdir,
        ["results/multidevice/lenet.1.seed0.csv"],
        "--set-resources",
        "multidevice_train:runtime=1",
        "--set-threads",
        "multidevice_train=1",
        preset="cpu",
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    job_ids = [log.stem for log in (workdir / ".snakemake" / "slurm_logs").rglob("*.log")]
    failed = [
        line for line in said.splitlines() if "TIMEOUT" in line and any(i in line for i in job_ids)
    ]
    assert failed and "multidevice_train" in said, said[-3000:]
    checkpoints = list((workdir / "results" / "multidevice" / "checkpoints").glob("lenet.1-*.pt"))
    assert len(checkpoints) == 1
