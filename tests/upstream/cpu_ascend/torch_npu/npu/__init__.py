"""`torch.npu` with the host as the device.

The host executes every operation synchronously, so synchronisation is immediate and streams/events only keep
their bookkeeping (events record a host time for `elapsed_time`). The "device" random generator is the CPU default
generator, because every "device" tensor is a host tensor and host ops draw from it. Memory figures are the
process's resident memory (/proc/self/statm): allocated = reserved = current RSS, peak = highest RSS seen since the last
reset (initially the process's peak RSS).
"""
from __future__ import annotations

import contextlib
import os
import resource
import time
import types

import torch

from torch_npu.npu import memory  # noqa: F401  (submodule, `torch.npu.memory.*`)

_state = {"device": 0, "peak": None, "compile_mode": {}, "options": {}}


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to initialise on the host."""


def device_count() -> int:
    """One host "device" per local process of the launch (at least one)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def _index(device) -> int:
    if device is None:
        return _state["device"]
    if isinstance(device, torch.device):
        return device.index if device.index is not None else _state["device"]
    if isinstance(device, str):
        return int(device.split(":")[1]) if ":" in device else _state["device"]
    return int(device)


def current_device() -> int:
    return _state["device"]


def set_device(device) -> None:
    index = _index(device)
    if not 0 <= index < max(device_count(), index + 1):
        raise ValueError(f"torch.npu.set_device: invalid device {device}")
    _state["device"] = index


@contextlib.contextmanager
def device(index):
    """Context manager selecting a device index (the host is every device)."""
    previous = _state["device"]
    if index is not None and _index(index) >= 0:
        _state["device"] = _index(index)
    try:
        yield
    finally:
        _state["device"] = previous


def _lazy_call(callable_, **kwargs) -> None:
    """torch_npu defers device callbacks until initialisation; the host is always initialised."""
    callable_()


def synchronize(device=None) -> None:
    """Host work is synchronous: nothing is pending."""


def get_device_name(device=None) -> str:
    return "cpu_ascend host"


def get_device_capability(device=None):
    return (0, 0)


def get_device_properties(device=None):
    return types.SimpleNamespace(name=get_device_name(), total_memory=_total_memory(), multi_processor_count=os.cpu_count())


def is_bf16_supported() -> bool:
    return True


class Event:
    """A host event: `record` stamps the host clock, waits return at once (work is already done)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream=None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream=None) -> None:
        """Already complete."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Already complete."""

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("torch.npu.Event.elapsed_time needs enable_timing=True on both events")
        if self._time is None or end_event._time is None:
            raise RuntimeError("torch.npu.Event.elapsed_time: both events must be recorded")
        return (end_event._time - self._time) * 1000.0


class Stream:
    """A host stream: work submitted to it has run when the call returns."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        self.device = torch.device("cpu")
        self.priority = priority

    def synchronize(self) -> None:
        """Nothing pending."""

    def wait_stream(self, stream) -> None:
        """Nothing pending."""

    def wait_event(self, event) -> None:
        """Nothing pending."""

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return 0


_DEFAULT_STREAM = Stream()
_current = [_DEFAULT_STREAM]


def current_stream(device=None) -> Stream:
    return _current[-1]


def default_stream(device=None) -> Stream:
    return _DEFAULT_STREAM


@contextlib.contextmanager
def stream(stream_: Stream | None):
    _current.append(stream_ or _current[-1])
    try:
        yield
    finally:
        _current.pop()


def set_stream(stream_: Stream) -> None:
    _current[-1] = stream_


# --- random numbers: the host generator --------------------------------------------------------------------

default_generators = tuple(torch.default_generator for _ in range(max(8, device_count())))


def manual_seed(seed: int) -> None:
    # Seed the generator directly: torch.manual_seed would call torch.cuda.manual_seed_all, which
    # transfer_to_npu points back here.
    torch.default_generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> None:
    torch.default_generator.seed()


seed_all = seed


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def get_rng_state(device="npu") -> torch.Tensor:
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device="npu") -> None:
    torch.default_generator.set_state(new_state)


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(states) -> None:
    set_rng_state(states[0])


# --- memory: the process's resident memory ------------------------------------------------------------------

def _rss() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak is the best figure available
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _peak() -> int:
    current = _rss()
    if _state["peak"] is None:
        _state["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    _state["peak"] = max(_state["peak"], current)
    return _state["peak"]


def memory_allocated(device=None) -> int:
    return _rss()


memory_reserved = memory_allocated
memory_cached = memory_allocated


def max_memory_allocated(device=None) -> int:
    return _peak()


max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device=None) -> None:
    _state["peak"] = _rss()


reset_max_memory_allocated = reset_peak_memory_stats
reset_max_memory_cached = reset_peak_memory_stats


def memory_stats(device=None) -> dict:
    current, peak = _rss(), _peak()
    return {"allocated_bytes.all.current": current, "allocated_bytes.all.peak": peak,
            "reserved_bytes.all.current": current, "reserved_bytes.all.peak": peak}


def mem_get_info(device=None):
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), _total_memory()


def empty_cache() -> None:
    """The host keeps no allocator cache."""


# --- configuration switches (no meaning on the host; recorded so callers can read them back) -------------

config = types.SimpleNamespace(allow_internal_format=False)
aclnn = types.SimpleNamespace(allow_hf32=False, allow_hf=False)
matmul = types.SimpleNamespace(allow_hf32=False)
conv = types.SimpleNamespace(allow_hf32=False)


def set_compile_mode(jit_compile: bool = False) -> None:
    _state["compile_mode"] = {"jit_compile": jit_compile}


def set_option(options: dict) -> None:
    _state["options"].update(options or {})
