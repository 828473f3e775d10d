"""``dlcomm topology``: the Crossover-SGD paper's Fig. 6 for any of the topologies.

For each step ``k`` the table holds ``lambda_2`` and the imbalance factor of ``P_k`` (see
:mod:`dlcomm.topology.mixing`), averaged over ``trials`` seeds for the random topologies: the topologies named, no others
(``crossover_unfair``, the paper's ``fair=false`` ablation, when asked for). Written as CSV and PNG
under ``results/topology/``; :func:`explain` is the text printed above the table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dlcomm.errors import UserError
from dlcomm.settings import parse_settings
from dlcomm.topology.mixing import RANDOM, TOPOLOGIES, mixing_curve


def parse_arguments(arguments: list[str]) -> dict[str, str]:
    """``key=value`` words; keys: topology, compare, nodes, steps, seed, trials."""
    known = {"topology": "crossover", "compare": "", "nodes": "16", "steps": "20", "seed": "0", "trials": "20"}
    return parse_settings(arguments, known, "topology", f"pass key=value with key one of {', '.join(known)}")


#: n x n float64 matrices the analysis holds at once: the product, one step's matrix, the new
#: product, and the singular value decomposition's copy and workspace.
MATRICES_HELD = 5


def check_fits(n: int) -> None:
    """Refuse ``nodes=n`` whose dense ``n x n`` matrices would not fit in the memory the kernel can
    give now (the analysis is exact, not sampled: its memory grows as n**2, its time as n**3)."""
    from dlcomm.memory import MIB, available_mib

    needed_mib = MATRICES_HELD * n * n * 8 / MIB
    usable_mib = 0.8 * available_mib()
    if needed_mib > usable_mib:
        most = int((usable_mib * MIB / (MATRICES_HELD * 8)) ** 0.5)
        raise UserError(
            f"nodes={n} is invalid here: the mixing analysis holds {MATRICES_HELD} dense {n}x{n} matrices, about "
            f"{needed_mib / 1024:.1f} GiB, and {usable_mib / 1024:.1f} GiB can be used; pass nodes={most} or fewer"
        )


def analyse(settings: dict[str, str]) -> pd.DataFrame:
    names = [name for name in (settings["compare"] or settings["topology"]).split(",") if name]
    for name in names:
        if name not in TOPOLOGIES:
            raise UserError(f"topology={name} is invalid: use one of {', '.join(TOPOLOGIES)}")
    names = list(dict.fromkeys(names))
    try:
        n, steps, seed, trials = (int(settings[key]) for key in ("nodes", "steps", "seed", "trials"))
    except ValueError:
        raise UserError("nodes, steps, seed and trials must be integers, e.g. nodes=16 steps=20") from None
    if n < 2 or steps < 1 or trials < 1:
        raise UserError(f"nodes={n} steps={steps} trials={trials} is invalid: pass nodes>=2, steps>=1, trials>=1")
    check_fits(n)
    table = pd.DataFrame({"step": np.arange(1, steps + 1)})
    for name in names:
        seeds = range(seed, seed + trials) if name in RANDOM else [seed]
        curves = np.array([mixing_curve(name, n, steps, s) for s in seeds])  # (seeds, steps, 2)
        table[f"lambda2_{name}"] = curves[:, :, 0].mean(axis=0)
        table[f"imbalance_{name}"] = curves[:, :, 1].mean(axis=0)
    return table


def explain(table: pd.DataFrame, settings: dict[str, str]) -> str:
    """What the table compares and what its columns mean (printed above it)."""
    names = [column[len("lambda2_") :] for column in table.columns if column.startswith("lambda2_")]
    random = [name for name in names if name in RANDOM]
    averaged = (
        f"; {', '.join(random)} averaged over {settings['trials']} random draws (seeds from {settings['seed']})"
        if random
        else ""
    )
    return "\n".join(
        [
            f"mixing of {', '.join(names)} on {settings['nodes']} ranks over {len(table)} gossip steps{averaged}.",
            "P_k = W_k ... W_1 is what k steps do to the ranks' values (x <- W x); J = 11^T/n is exact averaging.",
            "lambda2_<t>: the second largest singular value of P_k, how far k steps are from averaging (0 = averaged, "
            "1 = not mixing); lower is faster mixing.",
            "imbalance_<t>: the variance of the entries of P_k - J (0 when every rank holds the plain average; "
            "stays above 0 when some ranks' values count more than others').",
        ]
    )


def write(table: pd.DataFrame, settings: dict[str, str], folder: Path) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    names = [column[len("lambda2_") :] for column in table.columns if column.startswith("lambda2_")]
    stem = f"{'_vs_'.join(names)}_n{settings['nodes']}_k{settings['steps']}"
    csv = folder / f"{stem}.csv"
    table.to_csv(csv, index=False, float_format="%.6g")
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in names:
        left.plot(table["step"], table[f"lambda2_{name}"], marker="o", ms=3, label=name)
        right.plot(table["step"], table[f"imbalance_{name}"], marker="o", ms=3, label=name)
    left.set(xlabel="step k", ylabel="lambda_2 of W_k...W_1", title="mixing (lower is closer to the average)")
    right.set(xlabel="step k", ylabel="variance of (W_k...W_1 - J)", title="imbalance factor", yscale="symlog")
    right.set_yscale("symlog", linthresh=1e-6)
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(f"{settings['nodes']} ranks; random topologies averaged over {settings['trials']} seeds")
    figure.tight_layout()
    png = folder / f"{stem}.png"
    figure.savefig(png, dpi=120)
    plt.close(figure)
    return csv, png
