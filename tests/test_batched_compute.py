"""``launcher=threads launcher.compute=batched`` (issue 60): every rank's forward and backward as
one vmapped call gives serial compute's numbers (float64: to 1e-10; float32: to rounding), under
gloo's and NCCL's rules, with the simulated clock unchanged; its dropout draws have the right
statistics; its wall-clock split names each rank's share; what it cannot run is refused in one line.

Each job is a few steps of a small MLP on synthetic data, every rank a thread of this process
(``train_rank`` through :func:`dlcomm.launch.harness.run_ranks`, as tests/test_nccl_semantics.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pytest
import torch

from dlcomm.compose import compose
from dlcomm.data import build_dataset
from dlcomm.launch.harness import run_ranks
from dlcomm.spec import RunSpec
from dlcomm.train import loop
from dlcomm.train.batched import BatchedCompute
from dlcomm.train.profile import ComputeProfile

import rank_programs
from conftest import FAST, run_cli

BASE = [*rank_programs.FEW_STEPS_JOB, "model.hidden=[32,16]", "train.max_steps=6", "nodes=2", "workers_per_node=2"]
# the algorithms of the issue, with knobs that make them communicate within 6 steps
ALGORITHMS = {
    "allreduce": [],
    "local_sgd": ["algo.period=2"],
    "diloco": ["algo.period=2"],
    "dpsgd": [],
    "sgp": [],
    "crossover": [],
    "node_based": [],
    "sesgd": ["algo.groups=2"],
}


@pytest.fixture
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the model and the synthetic data are made in the default dtype
    yield
    torch.set_default_dtype(previous)


def _train(overrides: list[str], compute: str, run_dir: Path, semantics: str = "gloo", monkeypatch=None) -> dict:
    """Train ``overrides`` on 4 rank threads under ``compute``; every rank's loss per step (what
    the loop's ``hooked_step`` returned), final parameters and rank 0's summary."""
    cfg = compose([*BASE, *overrides])
    spec = RunSpec.from_config(cfg, tracking_uri="").with_run("test", run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    losses: dict[tuple[int, int], float] = {}
    lock = threading.Lock()
    real = loop.hooked_step

    def recorded(algorithm, *args, **kwargs):
        loss = real(algorithm, *args, **kwargs)
        cluster = getattr(algorithm, "cluster", None)  # None: a compute profile's measurement
        if cluster is not None:
            with lock:
                losses[(args[5], cluster.rank)] = float(loss.detach())
        return loss

    calls: list[int] = []  # the batched calls made (one per step for all ranks)
    perform = BatchedCompute.perform

    def counted(self, entries):
        calls.append(len(entries))
        return perform(self, entries)

    assert monkeypatch is not None
    monkeypatch.setattr(loop, "hooked_step", recorded)
    monkeypatch.setattr(BatchedCompute, "perform", counted)
    results = run_ranks(
        rank_programs.train_untracked,
        4,
        spec,
        build_dataset(cfg.dataset),
        nodes=2,
        in_process=compute,
        semantics=semantics,
        timeout=120,
    )
    assert calls == ([4] * 6 if compute == "batched" else []), calls
    return {"losses": losses, "params": [r["params"] for r in results], "summary": results[0]["summary"]}


def _max_difference(a: dict, b: dict) -> tuple[float, float]:
    """(largest loss difference, largest parameter difference) between two runs."""
    assert sorted(a["losses"]) == sorted(b["losses"]) and len(a["losses"]) == 6 * 4
    loss = max(abs(a["losses"][key] - b["losses"][key]) for key in a["losses"])
    params = max((pa[name] - pb[name]).abs().max().item() for pa, pb in zip(a["params"], b["params"]) for name in pa)
    return loss, params


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_batched_gives_serials_numbers_in_float64(name, tmp_path, monkeypatch, float64) -> None:
    overrides = [f"algo={name}", *ALGORITHMS[name]]
    serial = _train(overrides, "serial", tmp_path / "serial", monkeypatch=monkeypatch)
    batched = _train(overrides, "batched", tmp_path / "batched", monkeypatch=monkeypatch)
    assert next(iter(serial["params"][0].values())).dtype == torch.float64
    loss, params = _max_difference(serial, batched)
    assert loss <= 1e-10 and params <= 1e-10, (name, loss, params)


# float32: the vmapped call computes a replica's products with batched kernels (bmm for mm), whose
# sums run in another order: each result differs by a few units of float32's rounding (2^-24 ~ 6e-8
# relative), and 6 SGD steps carry that on. 1e-5 on losses of ~2.3 and parameters of ~0.2 is
# ~100 such units: rounding's scale, and orders of magnitude below a real difference (one rank's
# step left out moves the parameters by ~1e-2).
FLOAT32_TOLERANCE = 1e-5


@pytest.mark.parametrize("name", ["allreduce", "crossover"])
def test_batched_gives_serials_numbers_in_float32_to_rounding(name, tmp_path, monkeypatch) -> None:
    overrides = [f"algo={name}", *ALGORITHMS[name]]
    serial = _train(overrides, "serial", tmp_path / "serial", monkeypatch=monkeypatch)
    batched = _train(overrides, "batched", tmp_path / "batched", monkeypatch=monkeypatch)
    assert next(iter(serial["params"][0].values())).dtype == torch.float32
    loss, params = _max_difference(serial, batched)
    assert loss <= FLOAT32_TOLERANCE and params <= FLOAT32_TOLERANCE, (name, loss, params)


@pytest.mark.parametrize("name", ["allreduce", "sgp", "crossover"])
def test_batched_under_nccls_rules_on_the_simulated_network(name, tmp_path, monkeypatch, float64) -> None:
    """NCCL's rules with batched compute: no deadlock, serial's numbers under gloo's rules, and the
    simulated clock unchanged (it charges the compute profile, not what batching measures)."""
    overrides = [f"algo={name}", *ALGORITHMS[name], *_simulated(tmp_path)]
    serial = _train(overrides, "serial", tmp_path / "serial", monkeypatch=monkeypatch)
    batched = _train(overrides, "batched", tmp_path / "batched", "nccl", monkeypatch=monkeypatch)
    loss, params = _max_difference(serial, batched)
    assert loss <= 1e-10 and params <= 1e-10, (name, loss, params)
    _same_simulated_clock(serial, batched)


def _simulated(tmp_path: Path) -> list[str]:
    """The simulated network, its compute charged from a profile with round numbers for the MLP's
    6 tensors (nothing measured), whose gradients become ready in backward's order."""
    profile = tmp_path / "profile.json"
    profile.write_text(ComputeProfile(0.010, 0.020, 0.005, tuple(0.020 * (6 - i) / 6 for i in range(6))).to_json())
    return ["network=eth_10g", "network.mode=simulate", "network.compute=profile", f"network.compute_profile={profile}"]


def _same_simulated_clock(serial: dict, batched: dict) -> None:
    simulated = [key for key in serial["summary"] if "sim" in key]
    assert simulated
    for key in simulated:
        assert serial["summary"][key] == batched["summary"][key], key


def test_allreduce_overlap_fires_its_gradient_hooks_under_batched_compute(tmp_path, monkeypatch, float64) -> None:
    """The hooks registered on a rank's parameters fire after the batched call in backward's order
    (here the profiled clock's and allreduce's overlapped buckets, one per tensor, launched at
    their gradients' profiled instants): serial's numbers and simulated clock."""
    overrides = ["algo=allreduce", "algo.overlap=true", "algo.bucket_mb=0", *_simulated(tmp_path)]
    serial = _train(overrides, "serial", tmp_path / "serial", monkeypatch=monkeypatch)
    batched = _train(overrides, "batched", tmp_path / "batched", monkeypatch=monkeypatch)
    loss, params = _max_difference(serial, batched)
    assert loss <= 1e-10 and params <= 1e-10, (loss, params)
    _same_simulated_clock(serial, batched)


def test_dropout_draws_per_replica_masks_with_the_right_statistics() -> None:
    """Dropout under batched compute: each replica its own mask (vmap's randomness="different"),
    a mask keeps 1 - p of the units, the draws are a function of (seed, step) alone. The loss of
    ``Linear(Dropout(ones))`` with weights one makes the weight's gradient the mask's column sums."""
    from dlcomm.comm.inprocess import Fabric
    from dlcomm.train.batched import BatchedCompute

    ranks, width, batch, p = 4, 512, 8, 0.5

    def loss_fn(model, inputs, labels):
        return model(inputs).sum()

    def masks(step: int) -> list[torch.Tensor]:
        fabric = Fabric(batched=BatchedCompute(ranks), ranks=ranks)
        grads: dict[int, torch.Tensor] = {}

        def rank(r: int) -> None:
            fabric.enter(r)
            torch.manual_seed(r)
            model = torch.nn.Sequential(torch.nn.Dropout(p), torch.nn.Linear(width, 1, bias=False))
            torch.nn.init.ones_(model[1].weight)
            part = fabric.batched.for_rank(fabric, r)
            part.forward_backward(model, loss_fn, torch.ones(batch, width), torch.zeros(batch), step, seed=3)
            grads[r] = model[1].weight.grad.clone()
            fabric.leave(r)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        return [grads[r] for r in range(ranks)]

    first, again, later = masks(0), masks(0), masks(1)
    for r in range(ranks):
        kept = first[r] / (1 / (1 - p))  # each kept unit contributes 1/(1-p) per sample
        share = kept.sum().item() / (width * batch)
        assert abs(share - (1 - p)) < 0.03, share  # 4096 draws: 4.7 standard deviations
        assert torch.equal(first[r], again[r])  # the same (seed, step): the same draws
    assert not any(torch.equal(first[0], first[r]) for r in range(1, ranks))  # a mask per replica
    assert not torch.equal(first[0], later[0])  # another step: other draws


def test_a_batched_runs_split_names_each_ranks_share_of_the_call(home, cli_here) -> None:
    """timings.csv: ``batched_share_s`` is the rank's 1/N of the one call (the same for every rank
    of a step), counted in compute_s; the rest of the call is waiting (``peer_wait_s``)."""
    job = [*FAST, "model=mlp", "train.max_steps=4", "nodes=4", "launcher=threads", "train.timing_warmup=0"]
    result = cli_here(home, "train", *job, "launcher.compute=batched")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = pd.read_csv(home / "results" / "runs" / result.run_id / "timings.csv")
    assert len(rows) == 16 and rows["batched_share_s"].gt(0).all()
    assert rows.groupby("step")["batched_share_s"].nunique().eq(1).all()  # one call, equal shares
    assert (rows["batched_share_s"] <= rows["compute_s"] + 1e-9).all()
    total = rows["compute_s"] + rows["peer_wait_s"] + rows["comm_exposed_s"]
    assert ((total - rows["time_s"]).abs() < 1e-9).all()
    assert "compute=batched" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["algo=ps"], "launcher.compute=batched is invalid with algo=ps: its server rank(s) serve the workers"),
        (
            ["algo=gossip_pull", "algo.scheduler=autonomous"],
            "launcher.compute=batched is invalid with algo=gossip_pull: its workers step out of lockstep",
        ),
        (["train.amp=true"], "launcher.compute=batched is invalid with train.amp=true"),
        (["task=gan", "model=acgan"], "launcher.compute=batched is invalid with task=gan"),
        (
            ["network=eth_10g", "network.mode=simulate", "network.compute=measured"],
            "launcher.compute=batched is invalid with network.compute=measured",
        ),
    ],
    ids=["service role", "asynchronous pulls", "amp", "gan", "measured clock"],
)
def test_what_batched_compute_cannot_run_is_refused_in_one_line(home, cli_here, overrides, expected) -> None:
    result = cli_here(home, "train", *FAST, "launcher=threads", "launcher.compute=batched", *overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert expected in line and "launcher.compute=serial" in line, line
    assert not (home / "results" / "mlflow.db").exists()


def test_batched_compute_under_another_launcher_is_refused_naming_threads(home) -> None:
    result = run_cli(home, "train", *FAST, "launcher=local", "launcher.compute=batched", timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "dlcomm: error: launcher.compute is not a knob of launcher=local; it belongs to launcher=threads. "
        "Choose one of those (launcher=<choice>) or see launcher=local's knobs with `dlcomm config launcher=local`"
    ]
    assert not (home / "results").exists()


def test_auto_takes_batched_where_the_committed_measurement_says_it_is_faster(home, monkeypatch, tmp_path) -> None:
    """``launcher.compute=auto`` reads the measurement file (dlcomm.launch.compute_choice): batched
    where it beat the mode auto picks otherwise for the run's model and device (the nearest rank
    count), and only for a run batched compute can take; the opening line says why."""
    import json

    import torch

    from dlcomm.launch import compute_choice
    from dlcomm.launch.threads import resolve_compute

    def row(model: str, device: str, ranks: int, batched: float) -> dict:
        return {"device": device, "model": model, "ranks": ranks, "batch": 32, "serial": 40.0, "parallel": 20.0} | {
            "batched": batched,
            "one batch": 5.0,
        }

    table = tmp_path / "compute_modes.json"
    rows = [row("mlp", "cpu", 16, 10.0), row("mlp", "cpu", 64, 30.0), row("small_cnn", "cpu", 16, 25.0)]
    table.write_text(json.dumps({"rows": [*rows, row("resnet18", "cuda", 16, 12.0)]}))
    monkeypatch.setattr(compute_choice, "MEASURED", table)

    def mode(*overrides: str) -> tuple[str, str]:
        return resolve_compute(compose(["launcher=threads", *FAST, *overrides]))

    compute, why = mode("model=mlp", "nodes=16")
    assert compute == "batched", why
    assert why == (
        "auto: batched measured faster than parallel for model=mlp on cpu (10.0 against 20.0 ms/iter at 16 ranks "
        "of batch 32; launch/compute_modes.json)"
    )
    assert mode("model=mlp", "nodes=8")[0] == "batched"  # 16 is the nearest measured rank count
    assert mode("model=mlp", "nodes=48")[0] == "parallel"  # 64 ranks: batched measured slower
    assert mode("model=small_cnn", "nodes=16")[0] == "parallel"  # slower there
    assert mode("model=resnet18", "nodes=16")[0] == "parallel"  # not measured on the CPU: the rule
    assert mode("model=mlp", "nodes=16", "algo=ps")[0] == "parallel"  # cannot be batched
    assert mode("model=mlp", "nodes=16", "model.dropout=0.2")[0] == "serial"  # draws: serial's rule first
    assert mode("model=mlp", "nodes=16", "launcher.compute=parallel")[0] == "parallel"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert mode("model=resnet18", "nodes=16", "train.device=cuda")[0] == "batched"  # faster than taking turns
    assert mode("model=mlp", "nodes=16", "train.device=cuda")[0] == "serial"  # no GPU measurement of it


def test_the_committed_measurement_names_its_machine_and_every_mode(home) -> None:
    import json

    from dlcomm.launch.compute_choice import MEASURED

    measured = json.loads(MEASURED.read_text())
    assert measured["measured"] and measured["rows"]  # where, when, under what load
    for row in measured["rows"]:
        assert {"device", "model", "ranks", "batch", "serial", "parallel", "batched", "one batch"} <= set(row)


def test_micro_batches_accumulate_as_under_serial(tmp_path, monkeypatch, float64) -> None:
    """``train.comm_interval=2``: each rank's batch cut in two micro-batches whose gradients add up
    before one communication round, as serial's backward passes accumulate them."""
    overrides = ["algo=allreduce", "train.comm_interval=2"]
    serial = _train(overrides, "serial", tmp_path / "serial", monkeypatch=monkeypatch)
    batched = _train(overrides, "batched", tmp_path / "batched", monkeypatch=monkeypatch)
    loss, params = _max_difference(serial, batched)
    assert loss <= 1e-10 and params <= 1e-10, (loss, params)


def _bn_model(rank: int) -> torch.nn.Module:
    torch.manual_seed(rank)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def _bn_loss(model, inputs, labels):
    return torch.nn.functional.cross_entropy(model(inputs), labels)


def _batches(ranks: int, steps: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    generator = torch.Generator().manual_seed(1)
    return [
        [(torch.randn(4, 6, generator=generator), torch.randint(0, 3, (4,), generator=generator)) for _ in range(ranks)]
        for _ in range(steps)
    ]


def _step_alone_and_together(alone, together, fabric, batches, step: int) -> None:
    """One forward and backward of every rank: ``alone`` one model after the other, ``together``
    through the batched compute (a thread per rank)."""
    for r, model in enumerate(alone):
        model.zero_grad(set_to_none=True)
        _bn_loss(model, *batches[step][r]).backward()

    def rank(r: int) -> None:
        together[r].zero_grad(set_to_none=True)
        fabric.batched.for_rank(fabric, r).forward_backward(together[r], _bn_loss, *batches[step][r], step, seed=0)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(together))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


def _assert_same(alone, together) -> None:
    for a, b in zip(alone, together):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=0, atol=1e-12), name
            assert torch.allclose(p, q, rtol=0, atol=1e-12), name
        for (name, x), y in zip(a.named_buffers(), b.buffers()):
            assert torch.allclose(x.double(), y.double(), rtol=0, atol=1e-12), name


def test_batch_norm_keeps_each_replicas_statistics(float64) -> None:
    """A model with batch-norm: each replica normalises by its own batch's statistics and keeps its
    own running statistics (in its slice of the stacked buffer), as when each rank steps alone:
    the gradients and buffers of serial steps."""
    from dlcomm.comm.inprocess import Fabric

    ranks, steps = 3, 2
    batches = _batches(ranks, steps)
    alone = [_bn_model(r) for r in range(ranks)]
    together = [_bn_model(r) for r in range(ranks)]
    fabric = Fabric(batched=BatchedCompute(ranks), ranks=ranks)
    for step in range(steps):
        _step_alone_and_together(alone, together, fabric, batches, step)
        _assert_same(alone, together)
    assert int(together[0][1].num_batches_tracked) == steps


def test_each_ranks_tensors_are_views_of_the_stack_and_a_detached_one_is_still_read(float64) -> None:
    """The ranks' parameters and buffers live in one stacked tensor per name (no copy per step):
    an optimizer's in-place step on a rank's module is what the next call reads. A tensor whose
    ``.data`` is rebound (detached from the stack, as an algorithm binding its parameters into a
    flat buffer does) is read, and its batch-norm statistics written, as they are; a saved model
    holds its own rank's weights only."""
    import io

    from dlcomm.comm.inprocess import Fabric
    from dlcomm.train.checkpoint import model_state

    ranks, steps = 3, 3
    batches = _batches(ranks, steps)
    alone = [_bn_model(r) for r in range(ranks)]
    together = [_bn_model(r) for r in range(ranks)]
    optimizers = [
        [torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) for model in models] for models in (alone, together)
    ]
    fabric = Fabric(batched=BatchedCompute(ranks), ranks=ranks)
    for step in range(steps):
        if step == 2:  # rank 1's first weight and rank 2's running mean leave the stack, then change
            for models in (alone, together):
                weight, mean = models[1][0].weight, models[2][1].running_mean
                weight.data, mean.data = weight.data.clone(), mean.data.clone()
                with torch.no_grad():
                    weight.add_(0.5)
                    mean.add_(1.0)
        _step_alone_and_together(alone, together, fabric, batches, step)
        _assert_same(alone, together)
        if step == 0:
            for name, tensor in together[0].state_dict().items():
                storages = {model.state_dict()[name].untyped_storage().data_ptr() for model in together}
                assert len(storages) == 1, name  # every rank's tensor a view of one stack
                assert tensor.untyped_storage().nbytes() == ranks * tensor.numel() * tensor.element_size(), name
        for group in optimizers:
            for optimizer in group:
                optimizer.step()
    _assert_same(alone, together)
    assert together[1][0].weight.untyped_storage().nbytes() == 5 * 6 * 8  # the detached one: its own

    def saved(state: dict) -> int:
        file = io.BytesIO()
        torch.save(state, file)
        return len(file.getvalue())

    assert saved(model_state(together[0])) == saved(alone[0].state_dict())
    assert saved(together[0].state_dict()) > saved(alone[0].state_dict())  # why model_state is needed


def test_a_cpu_jobs_vmapped_calls_all_run_on_one_thread_of_their_own(float64) -> None:
    """Whichever rank arrives last, the call runs on the job's compute thread (its allocations
    come from one malloc arena, reused from step to step, not page-faulted afresh in another
    rank's); an error in it is raised on the rank thread that asked, and the thread ends with
    its job."""
    import gc

    from dlcomm.comm.inprocess import Fabric
    from dlcomm.train.batched import _ComputeThread

    ranks, steps = 3, 4
    batches = _batches(ranks, steps)
    models = [_bn_model(r) for r in range(ranks)]
    callers: set[threading.Thread] = set()
    real_loss = _bn_loss

    def loss_fn(model, inputs, labels):
        callers.add(threading.current_thread())
        return real_loss(model, inputs, labels)

    fabric = Fabric(batched=BatchedCompute(ranks), ranks=ranks)
    for step in range(steps):

        def rank(r: int, step: int = step, fabric: Fabric = fabric) -> None:
            fabric.batched.for_rank(fabric, r).forward_backward(models[r], loss_fn, *batches[step][r], step, seed=0)

        threads = [threading.Thread(target=rank, args=(r,), name=f"rank{r}") for r in range(ranks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(callers) == 1, callers
    (compute,) = callers
    assert compute.name not in {f"rank{r}" for r in range(ranks)} and compute.is_alive()
    del fabric, rank
    gc.collect()
    compute.join(timeout=10)
    assert not compute.is_alive()

    def fails(_: object) -> None:
        raise ValueError("in the call")

    with pytest.raises(ValueError, match="in the call"):
        _ComputeThread().run(fails, None)
