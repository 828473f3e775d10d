"""The PSS sampler (dlcomm.train.memory.PssMonitor): one thread per process, alive from the first
monitor's start to the last one's stop, and a training loop's monitor stops when the loop ends for
any reason (before: a loop that raised, e.g. a preempted or failed run, left the thread sampling
for the life of the process: seen in an xdist worker after in-process runs)."""

from __future__ import annotations

import math
import threading
import time

from dlcomm.train.memory import PssMonitor

from conftest import FAST


def _samplers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "pss-monitor" and thread.is_alive()]


def _gone(timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _samplers() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _samplers()


def test_one_thread_serves_every_monitor_until_the_last_stops_and_stop_is_idempotent() -> None:
    assert _gone(), "a sampler was left running before this test"
    first, second = PssMonitor(interval_s=0.01), PssMonitor(interval_s=0.01)
    assert len(_samplers()) == 1
    first.stop()
    first.stop()  # a second stop of the same monitor does not stop the other's sampling
    assert len(_samplers()) == 1
    peak = second.stop()
    assert _gone()
    assert math.isnan(peak) or peak > 0  # NaN where the kernel reports no PSS


def _stopped_run(cluster, channel, spec, folder: str):
    from dlcomm.algorithms.registry import ALGORITHMS

    import rank_programs

    *_, stopped_at = rank_programs.train_until_warned(
        cluster, channel, spec, folder, 1, ALGORITHMS.get(spec.cfg().algo.name)
    )
    return stopped_at


def test_a_loop_that_stops_early_leaves_no_sampler_running(tmp_path) -> None:
    from dlcomm.launch.harness import run_ranks

    import rank_programs

    assert _gone(), "a sampler was left running before this test"
    spec = rank_programs.run_spec(["algo=allreduce", "nodes=2", "model=mlp", *FAST, "train.max_steps=6"])
    stopped = run_ranks(_stopped_run, 2, spec, str(tmp_path), nodes=2, in_process="parallel", timeout=120)
    assert stopped[0] is not None and stopped == [stopped[0]] * 2 and stopped[0] < 6  # both raised Preempted
    assert _gone(), f"{len(_samplers())} sampler thread(s) still running after the loops raised"


def test_pss_is_read_when_the_resident_size_grows_not_every_interval(monkeypatch) -> None:
    """Reading smaps_rollup walks every mapping (5-20 ms with torch loaded): every half second it
    took 1-4% of a core beside a millisecond-step loop (scripts/bench_step_overhead.py)."""
    import dlcomm.train.memory as memory

    assert _gone(), "a sampler was left running before this test"
    reads: list[float] = []
    real = memory.current_pss_mib
    monkeypatch.setattr(memory, "current_pss_mib", lambda: reads.append(time.monotonic()) or real())
    at_start_mib = memory.current_rss_mib()  # about the sampler's baseline, taken as its thread starts
    monitor = PssMonitor(interval_s=0.01)
    began = time.monotonic()
    time.sleep(0.4)  # ~40 intervals of a resident size that hardly moves
    flat = len(reads)
    # Growth past the baseline by 3x memory.GROWTH, counted from the baseline, not from the resident
    # size now: in an xdist worker the allocator may hand memory of earlier tests back meanwhile
    # (seen in CI: 64 MiB on a resident size that had shrunk stayed under the baseline's 1%).
    target_mib = at_start_mib * (1 + 3 * memory.GROWTH)
    # (and at least 256 MiB: CI once saw no reading within 5 s of a smaller growth in a ~3 GB worker)
    grown = bytearray(b"\x01") * (max(256, int(target_mib - memory.current_rss_mib())) << 20)
    deadline = time.monotonic() + 10
    while len(reads) == flat and time.monotonic() < deadline:
        time.sleep(0.01)
    peak = monitor.stop()
    assert flat <= 3, f"PSS read {flat} times in {time.monotonic() - began:.1f} s of a flat resident size"
    assert len(reads) > flat + 1, f"the resident size grew by {len(grown) >> 20} MiB and PSS was not read"
    assert math.isnan(peak) or peak >= len(grown) / (1 << 20)
    assert _gone()


def test_only_the_last_stop_reads_pss_while_the_resident_size_stays_flat(monkeypatch) -> None:
    """Ranks that are threads stop one after another, each loop twice (its end, then its finally):
    every stop read smaps_rollup, and each read stalls the other threads on the memory map (half of
    a short threads job's time). Now an earlier stop reads only on growth, a second stop never."""
    import dlcomm.train.memory as memory

    assert _gone(), "a sampler was left running before this test"
    monkeypatch.setattr(memory, "current_rss_mib", lambda: 1000.0)  # flat: no growth to read on
    reads: list[float] = []
    real = memory.current_pss_mib
    monkeypatch.setattr(memory, "current_pss_mib", lambda: reads.append(time.monotonic()) or real())
    monitors = [PssMonitor(interval_s=60), PssMonitor(interval_s=60), PssMonitor(interval_s=60)]
    assert len(reads) == 1  # the first monitor's start
    for monitor in monitors[:2]:
        monitor.stop()
        monitor.stop()
    assert len(reads) == 1, f"{len(reads) - 1} reads by the stops of monitors that were not the last"
    peak = monitors[2].stop()
    assert len(reads) == 2 and (math.isnan(peak) or peak > 0)
    monitors[2].stop()
    assert len(reads) == 2 and _gone()
