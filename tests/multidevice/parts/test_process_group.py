"""Joining a run: the process group on the worker's device, and a lone worker without one."""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from d2lrepro.multidevice.parts import process_group


@pytest.mark.parametrize("device", ["cuda:1", "cpu"])
def test_a_worker_joins_on_its_device_and_pays_the_first_collective_before_timing(
    device, monkeypatch
):
    calls = []
    fake = {
        (torch.cuda, "set_device"): lambda d: calls.append(("set_device", d)),
        (process_group.dist, "init_process_group"): lambda backend, **kw: calls.append(
            ("init", backend, kw.get("device_id"))
        ),
        (process_group.dist, "barrier"): lambda: calls.append(("barrier",)),
    }
    for (module, name), fn in fake.items():
        monkeypatch.setattr(module, name, fn)
    process_group.join(torch.device(device), timedelta(seconds=60))
    if device == "cpu":
        assert calls == [("init", "gloo", None), ("barrier",)]
    else:  # NCCL's communicator forms at once, on this worker's GPU, and is used once
        gpu = torch.device(device)
        assert calls == [("set_device", gpu), ("init", "nccl", gpu), ("barrier",)]


def test_a_worker_without_torchrun_is_rank_0_on_its_device_in_no_process_group(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(process_group, "device_for", lambda rank, workers: torch.device("cpu"))
    pinned = []
    monkeypatch.setattr(process_group, "pin_to_core", pinned.append)
    monkeypatch.setattr(process_group, "join", lambda *a: pytest.fail("joined a process group"))
    with process_group.joined(60) as (device, rank):
        assert (device, rank) == (torch.device("cpu"), 0)
    assert pinned == [0] and not dist.is_initialized()
