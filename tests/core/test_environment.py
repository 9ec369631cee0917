"""What this machine is, as logs and records state it (d2lrepro.core.environment)."""

import subprocess

from conftest import node_record
from d2lrepro.core import environment


def test_a_launcher_reads_its_gpus_from_a_child_and_never_starts_cuda(cuda_count, monkeypatch):
    """Its workers use the GPUs: a context of its own on them would be one too many."""
    cuda_count(1)

    def started_cuda():
        raise AssertionError("the launcher's own process started CUDA")

    monkeypatch.setattr(environment, "gpu_facts", started_cuda)
    monkeypatch.setattr(environment, "gpu_facts_in_a_child", lambda: [("A GPU", 81559)])
    described = environment.describe(4, cuda_in_a_child=True)
    assert (described["gpus"], described["gpu_memory_mib"]) == (["A GPU"], [81559])


def test_the_child_that_reads_the_gpus_runs(cpu_only):
    assert environment.gpu_facts_in_a_child() == []  # the child sees what this process sees


def test_a_summary_names_the_host_the_cpu_its_cores_the_gpus_and_torch():
    with_gpu = node_record("node1", cores=4, gpus=2)
    assert environment.summary(with_gpu) == (
        "node1: Test CPU (4 cores), A GPU, A GPU, torch 2.13.0"
    )
    without_host = node_record(gpus=0) | {"host": ""}
    assert environment.summary(without_host) == "Test CPU (2 cores), no GPU, torch 2.13.0"


def test_the_machine_as_this_process_sees_it(cpu_only):
    described = environment.describe(threads=3)
    assert described["threads"] == 3 and described["cuda_devices"] == 0
    assert described["gpus"] == [] and described["cuda_available"] is False
    assert 1 <= described["usable_cores"] <= described["logical_cpus"]
    assert described["cpu_model"] == environment.cpu_model() != ""


def test_the_commit_says_whether_the_tree_differs_from_it(tmp_path):
    assert environment.git_commit(tmp_path) == "unknown (not a git checkout)"

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "one")
    head = environment.git_commit(tmp_path)
    assert len(head) == 12 and int(head, 16) >= 0
    (tmp_path / "a.txt").write_text("two\n")
    assert environment.git_commit(tmp_path) == head + " +changes"


def test_a_machine_as_a_job_given_fewer_gpus_describes_it():
    machine = environment.describe() | {
        "cuda_available": True,
        "cuda_version": "13.0",
        "cuda_devices": 2,
        "gpus": ["A", "B"],
        "gpu_memory_mib": [10, 20],
    }
    one = environment.as_given(machine, 1, threads=1)
    assert (one["cuda_devices"], one["gpus"], one["gpu_memory_mib"]) == (1, ["A"], [10])
    assert (one["threads"], one["cuda_version"], one["host"]) == (1, "13.0", machine["host"])
    none = environment.as_given(machine, 0, threads=1)
    assert (none["cuda_available"], none["cuda_version"], none["gpus"]) == (False, None, [])
    # a record of another host (a results tree moved here) is not this machine's
    moved = environment.as_given(machine | {"host": "elsewhere"}, 0, threads=1)
    assert moved["host"] == environment.describe()["host"] != "elsewhere"
