import torch

from d2lrepro import devices


def test_a_cpu_only_machine_runs_as_many_workers_as_it_has_cores(cuda_count, monkeypatch):
    cuda_count(0)
    monkeypatch.setattr(devices, "usable_cores", lambda: 2)
    assert devices.unavailable(1) == devices.unavailable(2) == ""
    assert devices.unavailable(3) == "needs 3 devices, this machine has 2 usable cores"
    assert devices.unavailable(cuda=1) == "needs CUDA, this machine has none"
    assert devices.unavailable(cuda=2) == "needs 2 CUDA devices, this machine has 0"
    assert devices.device_for(1, 2) == torch.device("cpu")


def test_fewer_gpus_than_workers_makes_every_worker_a_cpu_process(cuda_count):
    cuda_count(1)
    assert devices.worker_kind(1) == "cuda" and devices.device_for(0, 1) == torch.device("cuda", 0)
    assert devices.worker_kind(2) == "cpu"
    assert devices.device_for(0, 2) == devices.device_for(1, 2) == torch.device("cpu")
    assert devices.unavailable(cuda=2) == "needs 2 CUDA devices, this machine has 1"
    # the workflow compares like with like: 2 devices on a 1-GPU machine do not run
    assert devices.unavailable(2) == "needs 2 devices, this machine has 1 GPU"


def test_two_gpus_give_each_worker_its_own(cuda_count):
    cuda_count(2)
    assert [devices.device_for(r, 2) for r in (0, 1)] == [
        torch.device("cuda", 0),
        torch.device("cuda", 1),
    ]
    assert devices.unavailable(2, cuda=2) == ""


def test_a_recorded_machine_can_be_judged_instead_of_this_one():
    assert devices.unavailable(cuda=2, have_cuda=2, cores=1) == ""
    assert devices.unavailable(4, have_cuda=0, cores=2).startswith("needs 4 devices")


def test_describe_names_every_device():
    assert devices.describe([torch.device("cpu")] * 2) == "2 x CPU core"
