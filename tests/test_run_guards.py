"""What keeps a run honest when something goes wrong, unit by unit: the store probe, the launch
plan checks, the divergence report, the metric stream."""

from __future__ import annotations

import http.server
import math
import os
import threading
import time
from types import SimpleNamespace

import pytest

from dlcomm.errors import Diverged, UserError
from dlcomm.launch.driver import RankFailure, root_cause
from dlcomm.tracking.store import probe
from dlcomm.tracking.stream import MetricStream
from dlcomm.train.plan import check_plan


# --- the store probe -----------------------------------------------------------------------------
def test_a_sqlite_store_in_a_folder_that_cannot_be_written_is_refused_at_once(tmp_path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere: /proc refuses everyone
            target = "/proc/dlcomm/x.db"
        else:
            target = str(locked / "sub" / "x.db")
        start = time.perf_counter()
        with pytest.raises(UserError, match=rf"^tracking.uri=sqlite:///{target} cannot be written: folder "):
            probe(f"sqlite:///{target}")
        assert time.perf_counter() - start < 1
    finally:
        locked.chmod(0o700)
    probe(f"sqlite:///{tmp_path / 'new' / 'deeper' / 'mlflow.db'}")  # a writer creates its folder
    assert (tmp_path / "new" / "deeper").is_dir() and not list((tmp_path / "new" / "deeper").iterdir())
    with pytest.raises(UserError, match="^no MLflow store at "):
        probe(f"sqlite:///{tmp_path / 'absent.db'}", writer=False)


def test_a_server_that_does_not_answer_is_refused_after_the_timeout_and_only_mlflow_s_answer_counts(tmp_path) -> None:
    start = time.perf_counter()
    with pytest.raises(UserError, match=r"no server answered at 127.0.0.1:9 within 2 s \(2 tries, last: "):
        probe("http://127.0.0.1:9", timeout_s=2)
    assert 1.0 <= time.perf_counter() - start < 3.5

    class Server(http.server.BaseHTTPRequestHandler):
        """MLflow's experiments search under /mlflow (200, JSON); 404 anywhere else."""

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            mlflow = self.path == "/mlflow/api/2.0/mlflow/experiments/search"
            self.send_response(200 if mlflow else 404)
            self.end_headers()
            self.wfile.write(b'{"experiments": []}' if mlflow else b"not here")

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        start = time.perf_counter()
        probe(f"http://127.0.0.1:{server.server_port}/mlflow", timeout_s=2)  # MLflow answers there
        with pytest.raises(
            UserError,
            match=r"is not an MLflow tracking server \(it answered MLflow's experiments search with HTTP 404\)",
        ):
            probe(f"http://127.0.0.1:{server.server_port}", timeout_s=2)  # a 404 is some server, not MLflow
        assert time.perf_counter() - start < 1
    finally:
        server.shutdown()


def test_unknown_schemes_file_stores_and_stores_mlflow_cannot_open_are_refused() -> None:
    with pytest.raises(UserError, match=r"unknown scheme 'nonsense'"):
        probe("nonsense://x")
    with pytest.raises(UserError, match=r"is a file store"):
        probe("file:///tmp/mlruns")
    with pytest.raises(UserError, match=r"needs a Python package that is not installed"):
        probe("postgresql://user@127.0.0.1:1/db")  # opened as MLflow would: its driver is missing here
    with pytest.raises(UserError, match=r"^tracking.uri=databricks cannot be used \(.*DATABRICKS_HOST"):
        probe("databricks")


# --- the launch plan ------------------------------------------------------------------------------
def _train(**knobs) -> SimpleNamespace:
    defaults = dict(batch_size=64, comm_interval=1, epochs=2, max_steps=-1, eval_size=0, time_budget_s=0.0)
    return SimpleNamespace(**{**defaults, **knobs})


def test_the_plan_refuses_what_the_ranks_would_have_refused() -> None:
    assert check_plan(_train(), 4096, 4, 512) == (16, 32)
    with pytest.raises(UserError, match=r"^nodes\*workers_per_node=100 is invalid: .* use at most 64 workers"):
        check_plan(_train(), 4096, 100)
    with pytest.raises(
        UserError,
        match=r"^train.batch_size=5000 .* each of the 4 workers holds only 1024 .* pass "
        r"train.batch_size=1024 or less",
    ):
        check_plan(_train(batch_size=5000), 4096, 4)
    with pytest.raises(UserError, match=r"^train.eval_size=513 is invalid: the test set has 512 images"):
        check_plan(_train(eval_size=513), 4096, 4, 512)
    assert check_plan(_train(eval_size=512), 4096, 4, 512) == (16, 32)


def test_node_based_k_prime_is_checked_before_launch_with_the_same_words() -> None:
    from dlcomm.compose import compose
    from dlcomm.run import check_runnable

    cfg = compose(
        [
            "algo=node_based",
            "algo.k_prime=17",
            "dataset=synthetic",
            "dataset.train_size=4096",
            "dataset.test_size=512",
            "train.batch_size=64",
            "nodes=4",
        ]
    )
    with pytest.raises(UserError, match=r"^algo.k_prime=17 is invalid: an epoch has 16 iterations; pass at most 16"):
        check_runnable(cfg)
    cfg.algo.k_prime = 16
    check_runnable(cfg)


def test_fashion_mnist_sizes_come_from_the_file_headers() -> None:
    from dlcomm.compose import compose
    from dlcomm.data import build_dataset, dataset_sizes

    cfg = compose([]).dataset
    data = build_dataset(cfg)
    assert dataset_sizes(cfg) == (data.train_size, data.test_size) == (60000, 10000)


# --- divergence --------------------------------------------------------------------------------------
def test_divergence_is_stated_in_one_line_and_the_first_step_then_rank_is_reported() -> None:
    line = str(Diverged(math.nan, 7, 3))
    assert line == "loss became NaN at step 7 (rank 3); lower optim.lr or enable warm-up (optim.warmup_epochs=1)"
    assert str(Diverged(math.inf, 1, 0)).startswith("loss became inf at step 1 (rank 0);")
    failures = [
        RankFailure.diverged(Diverged(math.nan, 7, 3)),
        RankFailure.diverged(Diverged(math.inf, 7, 1)),
        RankFailure.diverged(Diverged(math.nan, 8, 0)),
        RankFailure(2, "raised RuntimeError: peer gone", at=0.0),
    ]
    assert root_cause(failures).describe() == str(Diverged(math.inf, 7, 1))  # not the earliest report: the first step
    killed = RankFailure(5, "was killed by SIGKILL", signalled=True, at=time.time())
    assert root_cause([*failures, killed]) is killed


# --- the metric stream ---------------------------------------------------------------------------------
def test_the_stream_sends_batches_while_running_and_the_rest_on_close() -> None:
    sent: list[list[tuple[str, float, int]]] = []
    stream = MetricStream(lambda points: sent.append(list(points)), every_s=0.05)
    for step in range(3):
        stream.add("loss", float(step), step)
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == [[("loss", 0.0, 0), ("loss", 1.0, 1), ("loss", 2.0, 2)]]  # before close: while training
    stream.add("loss", 3.0, 3)
    stream.close()
    stream.close()
    assert [point for batch in sent for point in batch] == [("loss", float(s), s) for s in range(4)]

    off = MetricStream(lambda points: sent.append(list(points)), every_s=0)
    off.add("loss", 1.0, 0)
    off.close()
    assert len([point for batch in sent for point in batch]) == 4


def test_the_stream_of_a_fast_loop_is_thinned_to_every_kth_step_on_both_series() -> None:
    """MLflow's store costs ~50-80 us of this process's Python per point: a loop of 1,000 steps a
    second streaming all of them lost ~8% of its speed (scripts/bench_step_overhead.py)."""
    import dlcomm.tracking.stream

    most = getattr(dlcomm.tracking.stream, "MIN_STEPS", 100)  # a batch of a fast loop's first seconds
    sent: list[tuple[str, float, int]] = []
    stream = MetricStream(lambda points: sent.extend(points), every_s=3600)  # close() sends the batch
    for step in range(10_000):
        stream.add("loss", float(step), step)
        stream.add("time", 0.001, step)
    stream.close()
    steps = sorted({step for _, _, step in sent})
    assert 2 <= len(steps) <= most + 1 and steps[0] == 0
    stride = steps[1] - steps[0]
    assert steps == list(range(0, 10_000, stride))  # evenly spaced
    assert sorted(step for name, _, step in sent if name == "loss") == steps
    assert sorted(step for name, _, step in sent if name == "time") == steps
    assert all(value == float(step) for name, value, step in sent if name == "loss")


def test_a_failed_send_is_raised_in_the_loop_thread_at_close() -> None:
    def broken(points) -> None:
        raise OSError("store gone")

    stream = MetricStream(broken, every_s=0.02)
    stream.add("loss", 1.0, 0)
    time.sleep(0.2)
    with pytest.raises(OSError, match="store gone"):
        stream.close()
