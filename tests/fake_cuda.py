"""A CUDA for machines without one, so that the package's in-process CUDA paths run, at tiny
sizes, in the default test command on a CPU-only machine (where a renamed argument or a missing
call would otherwise first fail on a reader's GPU).

Two fakes, each for what it serves:

- :func:`installed` (the CUDA tests' default): torch.cuda answers as a machine with
  ``devices`` GPUs would (available, count, names, properties, synchronize, the current device,
  streams, events), and CUDA tensors live on the CPU: a ``TorchFunctionMode`` maps every
  ``device="cuda[:i]"`` argument, ``.to("cuda")`` and ``.cuda()`` to the CPU (an index past the
  fake's devices fails, as on CUDA) and drops ``pin_memory`` and ``record_stream``. So the code
  computes real values. What differs from a GPU: tensors report device ``cpu``; a copy between
  host and "device" may hand back the tensor itself; each stream is one in-order queue; an
  event has completed once it is recorded (the CPU finishes an operation before it returns);
  NCCL process groups run on gloo; ``nn.parallel.scatter`` splits on the CPU (the CPU build of
  torch lacks ``torch._C._scatter``); and ``nn.DataParallel`` is stood in by a module that
  runs the wrapped one whole (torch's own insists that the parameters sit on a real
  ``cuda:0``): the book's code around it runs as written.
- :func:`kept_devices`: ``torch._subclasses.FakeTensorMode`` for one block, whose CUDA
  tensors keep their devices and shapes but hold no values: for assertions about where a
  tensor lands.

Timings under the fake are the CPU's: assertions about a GPU's numbers call :func:`real_gpu`,
which skips under the fake. Processes a test starts do not inherit the fake (torchrun
workers, jobs that lock GPUs): such tests need CUDA; a worker that a test spawns with a
function of its own installs the fake with :func:`install_for_good`.
"""

from __future__ import annotations

import contextlib
import re
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.overrides import TorchFunctionMode

REAL = torch.cuda.is_available()  # this machine's own CUDA, which the tests then use
DEVICES = 2  # the fake's GPUs: enough for every 2-device branch
GPUS = torch.cuda.device_count() if REAL else DEVICES  # what the CUDA tests run on
CUDA_NAME = re.compile(r"cuda(:\d+)?")
CPU = torch.device("cpu")


def sized(gpu, fake):
    """``gpu`` (a size, a count, a time limit) where the tests run on this machine's CUDA,
    else ``fake``: under the fake the CPU computes, and nothing it times is judged."""
    return gpu if REAL else fake


def real_gpu(what: str) -> None:
    """Skip the rest of a test under the fake: ``what`` needs a GPU's own numbers."""
    if not REAL:
        pytest.skip(f"{what} needs a real GPU's numbers; under the fake CUDA they are the CPU's")


class FakeCuda:
    """torch.cuda's answers for ``devices`` GPUs, whose work the CPU does as it is queued."""

    def __init__(self, devices: int):
        self.devices = devices
        self.current = 0
        self.streams: dict[int, Stream] = {}  # the current stream of each device

    def index(self, device=None) -> int | None:
        """The GPU that ``device`` names (None: the current one); None for the CPU, which
        stands in for every GPU's memory. A GPU past the fake's count fails, as on CUDA."""
        if device is None:
            return self.current
        if isinstance(device, str | int):
            device = torch.device("cuda", device) if isinstance(device, int) else device
        device = torch.device(device)
        if device.type == "cpu":
            return None
        if device.type != "cuda":
            raise ValueError(f"not a CUDA device: {device}")
        index = self.current if device.index is None else device.index
        if not 0 <= index < self.devices:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index} of {self.devices}")
        return index

    def device_count(self) -> int:
        return self.devices

    def get_device_name(self, device=None) -> str:
        return f"Fake CUDA {self.index(device) or 0} (the CPU)"

    def get_device_properties(self, device=None) -> SimpleNamespace:
        index = self.index(device) or 0
        return SimpleNamespace(
            name=self.get_device_name(index),
            total_memory=16 << 30,
            multi_processor_count=1,
            major=9,
            minor=0,
            uuid=f"GPU-fake-{index}",
        )

    def synchronize(self, device=None) -> None:
        self.index(device)

    def set_device(self, device) -> None:
        self.current = self.index(device) or 0

    def current_device(self) -> int:
        return self.current

    def current_stream(self, device=None) -> Stream:
        index = self.index(device) or 0
        return self.streams.setdefault(index, Stream(index))

    @contextlib.contextmanager
    def stream(self, stream: Stream | None):
        """torch.cuda.stream: ``stream`` is its device's current stream inside the block."""
        if stream is None:
            yield
            return
        before = self.current_stream(stream.device_index)
        self.streams[stream.device_index] = stream
        try:
            yield
        finally:
            self.streams[stream.device_index] = before

    def patches(self) -> dict[str, object]:
        """The attributes of torch.cuda that the fake replaces."""
        fake = self

        class BoundStream(Stream):
            def __init__(self, device=None, priority=0):
                super().__init__(fake.index(device) or 0, priority)

        return {
            "is_available": lambda: True,
            "device_count": self.device_count,
            "get_device_name": self.get_device_name,
            "get_device_properties": self.get_device_properties,
            "synchronize": self.synchronize,
            "set_device": self.set_device,
            "current_device": self.current_device,
            "current_stream": self.current_stream,
            "stream": self.stream,
            "Stream": BoundStream,
            "Event": Event,
        }


class Stream:
    """A CUDA stream whose work is done as it is queued: waits return at once."""

    def __init__(self, device_index: int = 0, priority: int = 0):
        self.device_index, self.priority = device_index, priority

    def wait_stream(self, stream: Stream) -> None:
        pass

    def wait_event(self, event: Event) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class Event:
    """A CUDA event: recorded at the time it is queued, which is when the CPU has done the
    work before it, so it has completed once recorded. elapsed_time needs both events timed
    and recorded, as on CUDA."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess=False):
        self.enable_timing = enable_timing
        self.at: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.at = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end``."""
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'")
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end.at - self.at) * 1e3


class CudaOnCpu(TorchFunctionMode):
    """Every CUDA device that a torch function is handed is the CPU (the device is checked
    against the fake's count); pinned memory is dropped."""

    def __init__(self, cuda: FakeCuda):
        super().__init__()
        self.cuda = cuda
        self.mapping = True  # off while FakeTensorMode keeps the devices (kept_devices)

    def on_cpu(self, value):
        named = isinstance(value, str) and CUDA_NAME.fullmatch(value)
        if named or (isinstance(value, torch.device) and value.type == "cuda"):
            self.cuda.index(value)
            return CPU
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if not self.mapping or func is torch.device:  # a CUDA device object stays one
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == "cuda":  # Tensor.cuda(device=None, ...): the tensor already is "there"
            self.cuda.index(args[1] if len(args) > 1 else kwargs.get("device"))
            return args[0]
        if name == "pin_memory":
            return args[0]
        kwargs.pop("pin_memory", None)
        if "device" in kwargs:
            kwargs["device"] = self.on_cpu(kwargs["device"])
        return func(*[self.on_cpu(a) for a in args], **kwargs)


def _scatter(tensor, devices, chunk_sizes=None, dim=0, streams=None):
    """torch._C._scatter, which nn.parallel.scatter calls: ``tensor`` cut into one chunk per
    device (``chunk_sizes`` rows each, else torch.chunk's), each copied to its device."""
    chunks = tensor.split(chunk_sizes, dim) if chunk_sizes else tensor.chunk(len(devices), dim)
    return [chunk.to(torch.device("cuda", d), copy=True) for chunk, d in zip(chunks, devices)]


class DataParallel(nn.Module):
    """nn.DataParallel under the fake: the module run whole, on the CPU that stands in for
    every GPU of ``device_ids`` (each checked against the fake's count)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.device_ids = [torch.cuda.current_device() if d is None else d for d in device_ids]
        for device in self.device_ids:
            torch.cuda.synchronize(device)  # an unknown GPU fails here, as in DataParallel

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def _gloo_for_nccl(real):
    def init_process_group(backend=None, *args, device_id=None, **kwargs):
        return real("gloo" if backend == "nccl" else backend, *args, **kwargs)

    return init_process_group


_MODES: list[CudaOnCpu] = []  # the fakes installed, innermost last
_FOR_GOOD: list = []  # fakes installed for the rest of the process, kept from collection


@contextlib.contextmanager
def installed(devices: int = DEVICES):
    """The fake CUDA of ``devices`` GPUs, for the block."""
    cuda = FakeCuda(devices)
    mode = CudaOnCpu(cuda)
    with pytest.MonkeyPatch.context() as patch, mode:
        for name, value in cuda.patches().items():
            patch.setattr(torch.cuda, name, value)
        # torch checks a stream's type before any mode sees the call
        patch.setattr(torch.Tensor, "record_stream", lambda tensor, stream: None)
        patch.setattr(torch._C, "_scatter", _scatter, raising=False)
        for module in (nn, nn.parallel):
            patch.setattr(module, "DataParallel", DataParallel)
        patch.setattr(dist, "init_process_group", _gloo_for_nccl(dist.init_process_group))
        _MODES.append(mode)
        try:
            yield cuda
        finally:
            _MODES.remove(mode)


@contextlib.contextmanager
def cuda_here(devices: int = DEVICES):
    """This machine's CUDA where it has one, else :func:`installed`."""
    if REAL:
        yield None
        return
    with installed(devices) as cuda:
        yield cuda


def install_for_good(devices: int = DEVICES) -> None:
    """:func:`cuda_here` for the rest of this process: a worker process that a test spawns,
    which inherits nothing of its parent's fake."""
    fake = cuda_here(devices)
    fake.__enter__()
    _FOR_GOOD.append(fake)


@contextlib.contextmanager
def kept_devices():
    """Under the fake, torch's FakeTensorMode for the block: its tensors keep their CUDA
    devices and shapes, and hold no values. On this machine's own CUDA, nothing changes."""
    if not _MODES:
        yield
        return
    from torch._subclasses import FakeTensorMode

    mode = _MODES[-1]
    mode.mapping = False
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            yield
    finally:
        mode.mapping = True
