"""The workflow through the SLURM profile on a one-node SLURM brought up on this machine
(Debian's slurmctld, slurmd, munge, and slurmdbd over a MariaDB for sacct; .ci/run installs
them), with each job's memory capped by cgroups as on a cluster. Skipped, with the reason,
where they are missing or the tests cannot start daemons (not root, no cgroup v1 memory
controller)."""

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import OUTPUTS, TIMING_RULES
from d2lrepro.core import provenance
from d2lrepro.pipeline import claims

DAEMONS = (
    "munged",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "sbatch",
    "sacct",
    "scontrol",
    "mariadbd",
    "mariadb-install-db",
)
PACKAGES = "slurmctld slurmd slurmdbd slurm-client munge mariadb-server"
# Outputs that depend on nothing but the code and the config.
DETERMINISTIC = ["results/data/fashion_mnist.pt", "results/data/airfoil.pt"]
# The rules that run in Snakemake's own process (downloads, verdicts, report, archive); all
# others go to SLURM.
LOCAL_RULES = {"fetch_data", "evaluate_claims", "report", "archive", "all"}
# Where every SLURM command looks without SLURM_CONF: the steps srun starts inside a job do;
# slurmdbd and the cgroup plugins read their own files beside it.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
DBD_CONF = SYSTEM_CONF.with_name("slurmdbd.conf")
CGROUP_CONF = SYSTEM_CONF.with_name("cgroup.conf")

pytestmark = pytest.mark.e2e


# The first line of the slurm.conf these tests write: one that starts with it is left by a run
# killed before the fixture could stop its cluster (Ctrl-C stops it), not a SLURM of this machine.
MARK = "# the one-node cluster of tests/test_slurm.py, removed after its tests\n"


def _clear_leftover() -> None:
    """Stop the daemons a killed run of these tests left, and remove its configuration."""
    text = SYSTEM_CONF.read_text() if SYSTEM_CONF.exists() else ""
    if not text.startswith(MARK):
        return
    dbd = DBD_CONF.read_text() if DBD_CONF.exists() else ""
    for pid_file in re.findall(r"^\w*PidFile=(.+)$", text + dbd, re.M):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(Path(pid_file).read_text()), signal.SIGTERM)
    if root := re.search(r"^StateSaveLocation=(.+)/state$", text, re.M):
        subprocess.run(["pkill", "-f", f"mariadbd --datadir={root[1]}/db"])
    for path in (SYSTEM_CONF, DBD_CONF, CGROUP_CONF):
        path.unlink(missing_ok=True)


def _why_not() -> str:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "the SLURM executor plugin is not installed (pip install -e '.[slurm]')"
    missing = [d for d in DAEMONS if not (shutil.which(d) or Path("/usr/sbin", d).exists())]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install {PACKAGES})"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        return "no cgroup v1 memory controller at /sys/fs/cgroup/memory (the test's cgroup.conf)"
    if SYSTEM_CONF.exists():
        return f"{SYSTEM_CONF} exists: a SLURM is configured here, and the test leaves it alone"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(command, env, done, what):
    """Poll ``command`` until ``done(result)``; fail the test after 30 s, naming ``what``."""
    for _ in range(60):
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if done(result):
            return
        time.sleep(0.5)
    pytest.fail(f"{what} never came up: {result.stdout}{result.stderr}")


def _accounting_database(root: Path, started: list) -> int:
    """A MariaDB server of its own, for slurmdbd: its port."""
    data, port = root / "db", _free_port()
    subprocess.run(
        ["mariadb-install-db", f"--datadir={data}", "--user=root", "--skip-test-db"],
        check=True,
        capture_output=True,
    )
    server = [
        "mariadbd",
        f"--datadir={data}",
        f"--socket={root / 'db.sock'}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        "--user=root",
        "--skip-grant-tables",  # a throwaway database on localhost: no accounts to set up
    ]
    started.append(subprocess.Popen(server, stderr=subprocess.DEVNULL))
    ping = ["mariadb", "-h", "127.0.0.1", "-P", str(port), "-u", "root", "-e", "select 1"]
    _wait_for(ping, None, lambda r: r.returncode == 0, "MariaDB")
    return port


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node SLURM cluster on this machine, with accounting (slurmdbd over MariaDB) so
    that sacct sees its jobs: its config path; the daemons stop after the module's tests, which
    share it (starting one takes seconds; each test reads only its own jobs)."""
    _clear_leftover()
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("cluster")
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    host, cpus = socket.gethostname().split(".")[0], os.cpu_count()
    conf, dbd_port = SYSTEM_CONF, _free_port()
    conf.parent.mkdir(exist_ok=True)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []  # processes and pid files to stop
    try:
        db_port = _accounting_database(root, started)
        DBD_CONF.write_text(
            f"""AuthType=auth/munge
DbdHost={host}
DbdPort={dbd_port}
SlurmUser=root
PidFile={root}/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=root
StorageLoc=slurm_acct_db
"""
        )
        DBD_CONF.chmod(0o600)
        conf.write_text(
            f"""{MARK}ClusterName=test
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
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={host}
AccountingStoragePort={dbd_port}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=600
ReturnToService=2
SlurmdTimeout=30
KillWait=5
NodeName={host} CPUs={cpus} RealMemory=16000 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
        )
        # Each job's memory capped at its mem_mb, as a cluster's cgroups do.
        CGROUP_CONF.write_text("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n")
        if subprocess.run(["munge", "-n"], capture_output=True).returncode:
            Path("/run/munge").mkdir(exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
            started.append(Path("/run/munge/munged.pid"))
        subprocess.run(["slurmdbd"], check=True, env=env)
        started.append(root / "slurmdbd.pid")
        _wait_for(
            ["sacctmgr", "-n", "list", "cluster"], env, lambda r: not r.returncode, "slurmdbd"
        )
        subprocess.run(["slurmctld", "-f", conf], check=True, env=env)
        subprocess.run(["slurmd", "-f", conf], check=True, env=env)
        started += [root / "slurmd.pid", root / "slurmctld.pid"]
        idle = ["sinfo", "-h", "-o", "%t"]
        _wait_for(idle, env, lambda r: r.stdout.strip() == "idle", "the SLURM node")
        _wait_for(
            ["sacctmgr", "-n", "list", "cluster"],
            env,
            lambda r: "test" in r.stdout,
            "the cluster's accounting",
        )
        yield conf
    finally:
        for daemon in reversed(started):
            if isinstance(daemon, subprocess.Popen):
                daemon.terminate()
                daemon.wait()
            elif daemon.exists():
                subprocess.run(["kill", daemon.read_text().strip()])
        for path in (conf, DBD_CONF, CGROUP_CONF):
            path.unlink(missing_ok=True)


def sacct_states(conf) -> dict[str, str]:
    """The state of every job SLURM's accounting holds, by job id."""
    env = {**os.environ, "SLURM_CONF": str(conf)}
    out = subprocess.run(
        ["sacct", "-a", "-X", "-n", "-P", "-o", "JobID,State", "-S", "now-1days"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line)


def _machine_can_judge(tree, claim_id) -> bool:
    """Whether the machines that measured ``claim_id``'s evidence in ``tree`` have what it
    requires (the preset aside: smoke scales every timing, and lets its timing jobs share
    the machine, which their records say)."""
    claim = next(c for s in claims.load()["sections"] for c in s["claims"] if c["id"] == claim_id)
    evidence = tree / claim["evidence"]
    rows, records = pd.read_csv(evidence), provenance.read(provenance.sidecar(evidence))
    assert any(r.get("ran_alone") is False for r in records.values())
    records = {i: {k: v for k, v in r.items() if k != "ran_alone"} for i, r in records.items()}
    return claims.evaluate_claim(claim, rows, records)["verdict"] != claims.NOT_APPLICABLE


def _slurm_command(mirror, targets, *options, preset="smoke"):
    """Snakemake's command line for ``targets`` through the SLURM profile."""
    command = [sys.executable, "-m", "snakemake", *targets, "--config", f"preset={preset}"]
    command += [f"data_mirror={mirror}", "--workflow-profile", "profiles/slurm"]
    command += ["--slurm-no-account"]
    return command + ["--slurm-init-seconds-before-status-checks", "2", *options]


def _through_slurm(conf, repo, mirror, workdir, targets, *options, preset="smoke"):
    """Snakemake run of ``targets`` through the SLURM profile in a copy of the repository."""
    shutil.copytree(repo, workdir, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    command = _slurm_command(mirror, targets, *options, preset=preset)
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


def test_jobs_killed_for_time_and_for_memory_name_their_rules_and_job_ids(
    slurm, repo, mirror, tmp_path
):
    """Two jobs of one run, each killed by SLURM, and Snakemake says which rule and which SLURM
    job, with SLURM's state. The 1-device LeNet on all 60,000 images, made 50 epochs long
    (several minutes on the fastest core seen, where the cpu preset's 10 epochs ended within
    SLURM's grace after the limit), given a 1-minute limit: SLURM kills it after a few epochs;
    the epochs done stay in its checkpoint, which a rerun resumes from
    (tests/multidevice/test_worker.py checks the resumed result). A job given less memory than
    importing torch takes: the cgroup's OOM killer ends it."""
    workdir = tmp_path / "w"
    longer = tmp_path / "longer.yaml"
    longer.write_text("presets: {cpu: {data_parallel: {runs: {lenet.1: {epochs: 50}}}}}\n")
    done = _through_slurm(
        slurm,
        repo,
        mirror,
        workdir,
        ["results/multidevice/data_parallel/lenet.1.seed0.csv", "results/figures/intro/risk.png"],
        *("--configfile", longer, "--keep-going"),
        *("--set-resources", "data_parallel_run:runtime=1", "intro:mem_mb=50"),
        *("--set-threads", "data_parallel_run=1"),
        preset="cpu",
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    states = sacct_states(slurm)
    for rule, state in (("data_parallel_run", "TIMEOUT"), ("intro", "OUT_OF_MEMORY")):
        logs = workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}"
        job_ids = [log.stem for log in logs.rglob("*.log")]
        assert job_ids, said[-3000:]
        failed = [line for line in said.splitlines() if state in line and job_ids[0] in line]
        assert failed and rule in said, said[-3000:]
        assert [states[i] for i in job_ids] == [state]
    checkpoints = list((workdir / "results" / "checkpoints").glob("lenet.1-*.pt"))
    assert len(checkpoints) == 1


def test_the_smoke_preset_runs_through_sbatch(slurm, repo, mirror, smoke_run, tmp_path):
    """The whole smoke preset through the profile: every job of every rule but the local ones
    (downloads, verdicts, report) is a SLURM job that completed, and deterministic outputs
    equal those of the local smoke run the end-to-end tests share. As the smoke preset lets
    them, the jobs that time share the node, a core each, but autopar, which times on all of
    its cores (the profile's whole-node request for each is tested in test_workflow.py)."""
    cpus = str(os.cpu_count())
    sharing = [rule for rule in TIMING_RULES if rule != "autopar"]
    cluster = tmp_path / "slurm"
    done = _through_slurm(
        slurm,
        repo,
        mirror,
        cluster,
        [],
        "--slurm-keep-successful-logs",
        *("--set-threads", f"autopar={cpus}", *(f"{rule}=1" for rule in sharing)),
        *("--set-resources", *(f"{rule}:slurm_extra=''" for rule in sharing)),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    said = done.stdout + done.stderr
    assert (cluster / "results" / "report.html").exists()
    # Each claim is judged on the machine of the job that measured it: the timing of two CPU
    # chains, on 2 cores in its SLURM job as here, is judged alike (the run's overview, a
    # 1-core job, plays no part); a job SLURM ran takes its allocation as its GPU lock.
    on_cluster = _machine_can_judge(cluster, "autopar.both.cpu")
    assert on_cluster == _machine_can_judge(smoke_run, "autopar.both.cpu") == (int(cpus) >= 2)
    assert "allocation is its lock" in (cluster / "logs" / "autopar.log").read_text()
    assert "allocation is its lock" not in (smoke_run / "logs" / "autopar.log").read_text()
    # The executor logs each job under its rule and SLURM job id; sacct has that job as
    # completed.
    states = sacct_states(slurm)
    slurm_logs = cluster / ".snakemake" / "slurm_logs"
    rules = {d.name.removeprefix("rule_") for d in slurm_logs.iterdir()}
    assert set(re.findall(r"^localrule (\w+):", said, re.M)) == LOCAL_RULES
    assert rules == set(re.findall(r"^rule (\w+):", said, re.M))
    assert {"lr_schedules_run", "hybridize", "data_parallel_run", "cost_model"} <= rules
    for rule in rules:
        job_ids = [log.stem for log in (slurm_logs / f"rule_{rule}").rglob("*.log")]
        assert job_ids and all(states[i] == "COMPLETED" for i in job_ids), (rule, states)
    for target in DETERMINISTIC:
        assert (cluster / target).read_bytes() == (smoke_run / target).read_bytes(), target


def _power_off(conf):
    """What a power cut does to the node: its slurmd and every process of its jobs (all in
    the jobs' cgroups) die at once; slurmctld finds out when the node stops answering."""
    jobs = Path("/sys/fs/cgroup").glob("*/slurm*/uid_*/job_*/**/cgroup.procs")
    pids = {int(pid) for procs in jobs for pid in procs.read_text().split()}
    slurmd = re.search(r"^SlurmdPidFile=(.+)$", conf.read_text(), re.M)[1]
    for pid in pids | {int(Path(slurmd).read_text())}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_node_that_fails_mid_training_names_the_rule_and_job_id_and_a_rerun_resumes(
    slurm, repo, mirror, tmp_path
):
    """The node loses power while the 1-device LeNet trains: slurmctld finds it not
    answering (SlurmdTimeout, 30 s here) and ends the job as NODE_FAIL, Snakemake names its rule and
    SLURM job id, and once the node is back a rerun resumes from the epochs its checkpoint
    holds."""
    env = {**os.environ, "SLURM_CONF": str(slurm)}
    workdir, target = tmp_path / "w", "results/multidevice/data_parallel/lenet.1.seed0.csv"
    longer = tmp_path / "longer.yaml"  # the smoke run of a few seconds, made 8 epochs long
    longer.write_text(
        "presets: {smoke: {data_parallel: {runs: {lenet.1: {epochs: 8, train_subset: 6000}}}}}\n"
    )
    shutil.copytree(repo, workdir, ignore=lambda d, names: [n for n in names if n in OUTPUTS])
    command = _slurm_command(
        mirror,
        [target],
        *("--configfile", longer, "--set-threads", "data_parallel_run=1"),
        *("--seconds-between-status-checks", "2"),
    )
    with subprocess.Popen(
        command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as running:
        try:
            checkpoints = workdir / "results" / "checkpoints"
            deadline = time.monotonic() + 300
            while not list(checkpoints.glob("lenet.1-*.pt")) and running.poll() is None:
                assert time.monotonic() < deadline, "no checkpoint after 5 minutes"
                time.sleep(0.5)
            _power_off(slurm)
            said = running.communicate(timeout=300)[0]
        finally:
            running.kill()
    assert running.returncode != 0, said[-3000:]
    job_ids = [log.stem for log in (workdir / ".snakemake" / "slurm_logs").rglob("*.log")]
    assert [sacct_states(slurm)[i] for i in job_ids] == ["NODE_FAIL"]
    assert re.search(rf"SLURM-job '{job_ids[0]}' failed due to a node failure", said), said[-3000:]
    assert "data_parallel_run" in said
    subprocess.run(["slurmd", "-f", slurm], check=True, env=env)  # back (ReturnToService=2)
    idle = ["sinfo", "-h", "-o", "%t"]
    _wait_for(idle, env, lambda r: r.stdout.strip() == "idle", "the node, back")
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (workdir / "logs" / "data_parallel_run" / "lenet.1.seed0.log").read_text()
    assert re.search(r"resuming from \S+ after epoch [1-7]\b", log), log[-2000:]
    assert len(pd.read_csv(workdir / target)) == 8
