"""One phrasing and one count for missing hardware (d2lrepro.core.shortfall)."""

import pytest

from d2lrepro.core import shortfall

WHO = "the job that measured it could use"


def test_two_devices_and_two_cuda_devices_lack_the_same_on_a_gpu_machine():
    """With GPUs a run's devices are GPUs: 16 cores do not stand in for a second one, and a
    claim about 2 devices and one about 2 CUDA devices lack the same thing."""
    devices = shortfall.reason(workers=2, have_cuda=1, cores=16)
    gpus = shortfall.reason(cuda=2, have_cuda=1, cores=16)
    assert devices == gpus == f"needs 2 devices, {WHO} 1 (1 GPU)"
    assert shortfall.group(devices) == shortfall.group(gpus) == "need 2 devices"


def test_cores_are_devices_only_where_there_is_no_gpu():
    assert shortfall.reason(workers=2, cores=2) == ""
    assert shortfall.reason(workers=3, cores=2) == f"needs 3 devices, {WHO} 2 (2 CPU cores)"
    # what needs CUDA cannot run on cores, however many
    assert shortfall.reason(cuda=1, cores=16) == f"needs CUDA, {WHO} none"
    assert shortfall.reason(cuda=2, cores=16) == f"needs 2 GPUs, {WHO} none"
    assert shortfall.reason(workers=2, cuda=2, have_cuda=2, cores=1) == ""


def test_a_claim_needing_cores_names_the_host_where_it_is_known():
    lacking = shortfall.reason(need_cores=2, cores=1, host="node7")
    assert lacking == "needs 2 CPU cores, the job that measured it (on node7) could use 1"
    assert shortfall.reason(need_cores=2, cores=2) == ""


@pytest.mark.parametrize(
    "reason, group",
    [
        (f"needs CUDA, {WHO} none", "need a GPU"),
        (f"needs 2 GPUs, {WHO} none", "need 2 GPUs"),
        (f"the book's one-process path needs 2 devices, {WHO} 1 (1 GPU)", "need 2 devices"),
        (
            f"no more devices than the 2-worker run's (needs 3 devices, {WHO} 2 (2 GPUs))",
            "need 3 devices",
        ),
        ("needs 2 nodes, this job has 1: run it on a SLURM cluster", "need 2 nodes"),
        (f"needs 2 CPU cores, {WHO} 1", "need 2 CPU cores"),
        # not a lack of hardware
        ("torch.compile needs a C++ compiler (g++ or clang++), and none is on the PATH", ""),
        ("judged at the book's scale only: preset cpu scaled x.epochs = 1 (book: 10)", ""),
    ],
)
def test_each_shortfall_is_counted_in_one_group(reason, group):
    assert shortfall.group(reason) == group


def test_a_group_says_whether_cores_could_stand_in():
    assert shortfall.devices_needed("need 2 devices") == 2
    assert shortfall.devices_needed("need 2 GPUs") == shortfall.devices_needed("need a GPU") == 0
    assert shortfall.needs_gpus("need a GPU") and shortfall.needs_gpus("need 2 GPUs")
    assert not shortfall.needs_gpus("need 2 devices")
    assert not shortfall.needs_gpus("need 2 CPU cores")
