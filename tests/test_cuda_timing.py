"""CUDA-true timing on a CPU machine: a fake ``torch.cuda`` (events, streams, a device timeline on
which kernels and transfers take known times) checks that every timed region is closed on the
compute stream, that nothing calls a device-wide synchronize, and that the split of a fake
iteration comes out right (docs/metrics.md, "The same meaning on CPU and GPU")."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import pytest
import torch

from dlcomm.comm import clock as clock_module
from dlcomm.comm import device_timing
from dlcomm.comm.clock import VirtualClock, compute_timer
from dlcomm.comm.device_timing import CudaTimer, HostTimer, IterationSplit, StreamClock, device_timer

CUDA = torch.device("cuda", 0)


# ---- a fake device: streams with a timeline (ms), events, NCCL-like works ---------------------------
class FakeStream:
    def __init__(self, gpu: "FakeGPU", name: str) -> None:
        self.gpu, self.name = gpu, name
        self.tail = 0.0  # when the work queued so far on this stream completes


class FakeGPU:
    """The host enqueues instantly unless told to spend time (``host_work``); a stream runs its
    queue in order; an event completes when its stream reaches it."""

    def __init__(self) -> None:
        self.host = 0.0
        self.calls: list[tuple] = []  # in call order
        self.default = FakeStream(self, "default")
        self.current = self.default
        self.nccl = FakeStream(self, "nccl")
        self.nccl_timing = False  # TORCH_NCCL_ENABLE_TIMING
        self.timed = False  # inside a timed region: a device-wide synchronize fails the test

    def stream(self, name: str) -> FakeStream:
        return FakeStream(self, name)

    def kernel(self, ms: float) -> None:
        stream = self.current
        stream.tail = max(stream.tail, self.host) + ms

    def host_work(self, ms: float) -> None:
        self.host += ms

    def transfer(self, ms: float) -> "FakeWork":
        """An NCCL operation: its stream first waits for the compute stream's point of issue."""
        start = max(self.nccl.tail, self.current.tail, self.host)
        self.nccl.tail = start + ms
        return FakeWork(self, start, start + ms)

    # torch.cuda's functions
    def current_stream(self, device=None) -> FakeStream:
        return self.current

    def synchronize(self, device=None) -> None:
        self.calls.append(("torch.cuda.synchronize",))
        if self.timed:
            pytest.fail("torch.cuda.synchronize() called inside a timed region")
        self.host = max([self.host, self.nccl.tail, self.default.tail, self.current.tail])

    def event_class(self) -> type:
        gpu = self

        class FakeEvent:
            def __init__(
                self,
                enable_timing: bool = False,
                blocking: bool = False,
                interprocess: bool = False,
                external: bool = False,
            ) -> None:
                self.enable_timing = enable_timing
                self.time: float | None = None
                self.stream: FakeStream | None = None

            def record(self, stream: FakeStream | None = None) -> None:
                stream = stream or gpu.current
                self.stream, self.time = stream, max(stream.tail, gpu.host)
                gpu.calls.append(("record", stream.name))

            def query(self) -> bool:
                return self.time is not None and self.time <= gpu.host

            def synchronize(self) -> None:
                gpu.calls.append(("event.synchronize", self.stream.name))
                gpu.host = max(gpu.host, self.time)

            def elapsed_time(self, end: "FakeEvent") -> float:
                assert self.enable_timing and end.enable_timing, "events created without enable_timing"
                if not (self.query() and end.query()):  # cudaEventElapsedTime: cudaErrorNotReady
                    raise RuntimeError("CUDA error: device not ready")
                return end.time - self.time

        return FakeEvent


class FakeWork:
    def __init__(self, gpu: FakeGPU, start: float, end: float) -> None:
        self.gpu, self.start, self.end = gpu, start, end

    def wait(self) -> bool:
        """NCCL: the current stream waits for the operation; the host returns at once."""
        stream = self.gpu.current
        stream.tail = max(stream.tail, self.gpu.host, self.end)
        return True

    def is_completed(self) -> bool:
        return self.end <= self.gpu.host

    def _get_duration(self) -> float:
        if not self.gpu.nccl_timing:
            raise RuntimeError("getDuration only works if timing was enabled")  # torch 2.14's text, shortened
        if not self.is_completed():
            raise RuntimeError("getDuration only works after the work has completed")
        return self.end - self.start


@pytest.fixture
def gpu(monkeypatch) -> FakeGPU:
    fake = FakeGPU()
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())
    monkeypatch.setattr(torch.cuda, "current_stream", fake.current_stream)
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    return fake


# ---- the Channel's lines, as Handle.wait and Channel.record run them --------------------------------
def issue(gpu: FakeGPU, timer, ms: float, group: str = "world") -> tuple[SimpleNamespace, list[FakeWork]]:
    record = SimpleNamespace(group=group, blocked_s=0.0)
    timer.issued(record)  # Channel.record, for an operation of the iteration
    return record, [gpu.transfer(ms)]  # the transport's launch


def handle_wait(timer, record, works, host_blocked_ms: float = 0.0, gpu: FakeGPU | None = None) -> None:
    """Handle.wait's lines: ``host_blocked_ms`` is host time spent inside it after the works'
    wait (the clocks' exchange, emulate's sleep)."""
    token = timer.before_wait()
    for work in works:
        work.wait()
    timer.transferred(token)
    if host_blocked_ms:
        gpu.host_work(host_blocked_ms)
    timer.after_wait(token, record, works)


def fake_iteration(gpu: FakeGPU, timer: CudaTimer, transfer_ms: float) -> IterationSplit:
    """30 ms of kernels: 10, then a transfer is issued, 12 more, the wait, 8 more."""
    gpu.timed = True
    timer.begin_iteration()
    gpu.kernel(10)
    record, works = issue(gpu, timer, transfer_ms)
    gpu.kernel(12)
    handle_wait(timer, record, works)
    gpu.kernel(8)
    split = timer.end_iteration()
    gpu.timed = False
    return split


# ---- the split --------------------------------------------------------------------------------------
@pytest.mark.parametrize("nccl_timing", [False, True])
def test_a_partly_hidden_transfer_splits_into_compute_exposed_and_busy(gpu, nccl_timing) -> None:
    # 20 ms transfer issued at 10 ms, 12 ms of it under the next kernel: the stream stalls 8 ms
    gpu.nccl_timing = nccl_timing
    split = fake_iteration(gpu, CudaTimer(CUDA), transfer_ms=20)
    assert split.time_s == pytest.approx(0.038)
    assert split.exposed_s == pytest.approx(0.008)
    assert split.compute_s == pytest.approx(0.030)
    assert split.busy_s == pytest.approx(0.020)


def test_a_hidden_transfer_is_busy_for_its_nccl_duration_and_exposes_nothing(gpu) -> None:
    gpu.nccl_timing = True
    split = fake_iteration(gpu, CudaTimer(CUDA), transfer_ms=5)
    assert (split.time_s, split.exposed_s, split.compute_s) == pytest.approx((0.030, 0.0, 0.030))
    assert split.busy_s == pytest.approx(0.005)


def test_without_nccl_timing_a_hidden_transfer_is_busy_until_the_stream_reached_its_wait(gpu) -> None:
    split = fake_iteration(gpu, CudaTimer(CUDA), transfer_ms=5)
    assert (split.time_s, split.exposed_s) == pytest.approx((0.030, 0.0))
    assert split.busy_s == pytest.approx(0.012)  # issued at 10, wait reached at 22: an upper bound


def test_operations_of_one_group_queue_behind_each_other(gpu) -> None:
    # two 10 ms allreduces issued together at 10 ms run 10-20 and 20-30; a 25 ms kernel hides both
    gpu.nccl_timing = True
    timer = CudaTimer(CUDA)
    timer.begin_iteration()
    gpu.kernel(10)
    first, second = issue(gpu, timer, 10), issue(gpu, timer, 10)
    gpu.kernel(25)
    handle_wait(timer, *first)
    handle_wait(timer, *second)
    split = timer.end_iteration()
    assert split.time_s == pytest.approx(0.035)
    assert split.exposed_s == pytest.approx(0.0)
    assert split.busy_s == pytest.approx(0.020)


def test_host_time_blocked_in_the_wait_is_exposed_when_the_device_idles(gpu) -> None:
    # emulate: the host sleeps in Handle.wait until the modelled end, 40; the stream waits with it
    timer = CudaTimer(CUDA)
    timer.begin_iteration()
    gpu.kernel(10)
    record, works = issue(gpu, timer, 20)
    gpu.kernel(12)
    gpu.host = 22.0  # the host reaches the wait when the device does; the transfer ends at 30
    handle_wait(timer, record, works, host_blocked_ms=18, gpu=gpu)
    gpu.kernel(8)
    split = timer.end_iteration()
    assert split.time_s == pytest.approx(0.048)
    assert split.exposed_s == pytest.approx(0.018)  # 22-30 the transfer, 30-40 the modelled rest
    assert split.compute_s == pytest.approx(0.030)
    assert split.busy_s == pytest.approx(0.020)  # the real transfer, 10-30


def test_an_operation_not_waited_is_in_flight_until_the_iteration_ends(gpu) -> None:
    timer = CudaTimer(CUDA)
    timer.begin_iteration()
    gpu.kernel(10)
    issue(gpu, timer, 50)  # waited in the next iteration (SGP's overlap)
    gpu.kernel(20)
    split = timer.end_iteration()
    assert (split.time_s, split.exposed_s, split.busy_s) == pytest.approx((0.030, 0.0, 0.020))


def test_the_host_clock_around_an_nccl_wait_reads_nothing_the_events_read_the_stall(gpu) -> None:
    # what was wrong: Work.wait() returns at once on the host, so blocked_s (host time) is 0
    timer = CudaTimer(CUDA)
    gpu.timed = True
    timer.begin_iteration()
    gpu.kernel(10)
    record, works = issue(gpu, timer, 20)
    handle_wait(timer, record, works)
    split = timer.end_iteration()
    assert record.blocked_s < 0.001
    assert split.exposed_s == pytest.approx(0.020)


# ---- where the events go, and what is synchronised ---------------------------------------------------
def test_every_event_is_on_the_compute_stream_and_one_event_sync_closes_the_iteration(gpu) -> None:
    compute = gpu.stream("compute")
    gpu.current = compute  # the rank computes on a stream of its own
    fake_iteration(gpu, CudaTimer(CUDA), transfer_ms=20)
    records = [call for call in gpu.calls if call[0] == "record"]
    assert records and all(call == ("record", "compute") for call in records)
    syncs = [call for call in gpu.calls if call[0] != "record"]
    assert syncs == [("event.synchronize", "compute")]  # no torch.cuda.synchronize, one host sync
    assert gpu.calls[-1] == ("event.synchronize", "compute")  # the last event, closing the region


def test_elapsed_times_are_read_only_after_the_end_event_was_synchronised(gpu) -> None:
    # the fake's elapsed_time raises on an event not yet complete, as CUDA's does: the device is
    # far behind the host here (100 ms of kernels), so any earlier read would raise
    timer = CudaTimer(CUDA)
    for _ in range(3):
        timer.begin_iteration()
        gpu.kernel(100)
        record, works = issue(gpu, timer, 20)
        handle_wait(timer, record, works)
        split = timer.end_iteration()
        assert split.time_s == pytest.approx(0.120)
        assert split.exposed_s == pytest.approx(0.020)


def test_waits_outside_an_iteration_or_on_other_threads_are_not_timed(gpu) -> None:
    timer = CudaTimer(CUDA)
    record = SimpleNamespace(group="world", blocked_s=0.0)
    handle_wait(timer, record, [gpu.transfer(5)])  # setup's broadcast, before any iteration
    assert not [call for call in gpu.calls if call[0] == "record"]
    timer.begin_iteration()
    before = len(gpu.calls)
    served = SimpleNamespace(wait=lambda: True)  # a service responder's work
    other = threading.Thread(target=lambda: handle_wait(timer, SimpleNamespace(group="job", blocked_s=0.0), [served]))
    other.start()
    other.join()
    assert len(gpu.calls) == before  # a service thread's wait: no event on the loop's stream
    gpu.kernel(10)
    split = timer.end_iteration()
    assert (split.time_s, split.exposed_s, split.busy_s) == pytest.approx((0.010, 0.0, 0.0))


def test_nccl_duration_is_read_only_where_there_is_one() -> None:
    class Done:
        def _get_duration(self) -> float:
            return 7.5

    class Disabled:
        def _get_duration(self) -> float:
            raise RuntimeError("getDuration only works if timing was enabled")

    assert device_timing.nccl_duration_ms([Done(), Disabled(), object()]) == 7.5
    assert device_timing.nccl_duration_ms([Disabled(), object()]) is None


# ---- the simulated clock ----------------------------------------------------------------------------
def test_the_simulated_clock_on_cuda_waits_for_its_stream_not_the_device(gpu) -> None:
    gpu.timed = True
    compute = compute_timer(CUDA)
    clock = VirtualClock(compute)
    clock.resume()
    gpu.transfer(50)  # an allreduce in flight, not waited on: its time is not compute
    gpu.kernel(10)
    assert clock.now() == pytest.approx(0.010)
    assert ("torch.cuda.synchronize",) not in gpu.calls
    assert {call for call in gpu.calls if call[0] == "event.synchronize"} == {("event.synchronize", "default")}


def test_the_simulated_clock_forgets_a_transfer_its_stream_waited_on(gpu) -> None:
    # Handle.wait: read the clock, make the stream wait for the transfer, rebase to the reading
    gpu.timed = True
    clock = VirtualClock(compute_timer(CUDA))
    clock.resume()
    gpu.kernel(10)
    work = gpu.transfer(40)
    before = clock.now()
    work.wait()
    clock.exclude_blocked(before)
    gpu.kernel(5)
    assert before == pytest.approx(0.010)
    assert clock.now() == pytest.approx(0.015)
    assert ("torch.cuda.synchronize",) not in gpu.calls


def test_the_stream_clock_reads_the_current_stream(gpu) -> None:
    compute = gpu.stream("compute")
    gpu.current = compute
    read = StreamClock(CUDA)
    read()
    gpu.kernel(3)
    assert read() == pytest.approx(0.003)
    assert {call[1] for call in gpu.calls} == {"compute"}


# ---- CPU: the host clock, today's numbers ----------------------------------------------------------
def test_cpu_uses_the_host_timer_and_cuda_the_event_timer() -> None:
    assert isinstance(device_timer(torch.device("cpu")), HostTimer)
    assert isinstance(device_timer(CUDA), CudaTimer)


def test_the_host_timer_takes_the_loop_and_channel_readings(monkeypatch) -> None:
    readings = iter([100.0, 101.0, 101.25, 102.5])
    monkeypatch.setattr(device_timing, "perf_counter", lambda: next(readings))
    timer = HostTimer()
    timer.begin_iteration()  # the loop: start = perf_counter() after Channel.begin_iteration
    record = SimpleNamespace(group="world", blocked_s=0.5)
    token = timer.before_wait()  # Handle.wait: started = perf_counter()
    timer.transferred(token)
    timer.after_wait(token, record, [])  # record.blocked_s += perf_counter() - started
    assert record.blocked_s == 0.5 + (101.25 - 101.0)
    # the Channel's IterationComm of processes: waiting for peers unknown, all of it exposed
    comm = SimpleNamespace(exposed_s=0.75, busy_s=0.9, peer_wait_s=math.nan, carried_s=0.0)
    split = timer.end_iteration(comm)  # the loop: time_s = perf_counter() - start after end_iteration
    assert split.time_s == 102.5 - 100.0 and split.exposed_s == 0.75 and math.isnan(split.peer_wait_s)
    assert split.compute_s == (102.5 - 100.0) - 0.75


def test_waiting_for_peers_comes_off_the_exposed_time_and_a_transfer_made_in_the_call_goes_on() -> None:
    """Threads: of 0.75 s blocked, 0.5 s waited for peers; the rank also moved the data of another
    operation in its own issuing call for 0.1 s (counted as compute by the host clock)."""
    from dlcomm.comm.device_timing import split_waits

    comm = SimpleNamespace(exposed_s=0.75, busy_s=0.9, peer_wait_s=0.5, carried_s=0.1)
    split = split_waits(2.5, 0.75, comm)
    assert split.peer_wait_s == 0.5 and split.exposed_s == pytest.approx(0.35)
    assert split.compute_s == pytest.approx(2.5 - 0.5 - 0.35)
    # on CUDA the stream's stall can be shorter than the host's wait: the waiting never exceeds it
    assert split_waits(2.5, 0.2, comm).peer_wait_s == 0.2


def test_the_cpu_compute_clocks_are_unchanged() -> None:
    import time

    assert compute_timer(torch.device("cpu"), alone=True) is clock_module.perf_counter
    expected = time.thread_time if torch.get_num_threads() == 1 else time.process_time
    assert compute_timer(torch.device("cpu")) is expected
