#!/usr/bin/env python
"""How long composing takes: ``dlcomm config`` (the defaults), two refusals of bad input and, for
context, ``dlcomm --help``, each the median wall and CPU seconds of ``--repeats`` fresh processes.

Issue 59's targets, on the development machine alone: ``dlcomm config`` <= 0.6 s and a refusal
<= 1 s (wall), each marked PASS or FAIL for the code measured last. The refusals are a value
outside its domain (``optim.lr=-1``: refused after Hydra composed) and an unknown choice
(``algo=nosuch``: refused by Hydra, whose message lists every algorithm, so every choice is found
and stored first: the slowest kind).

Every command runs as ``python -m dlcomm.cli`` with ``PYTHONPATH`` set to the code measured (this
checkout's ``src`` by default), in one temporary ``DLCOMM_HOME`` and working folder; its CPU time
(user + system) is the child's own, from ``os.wait4``. With ``--old <src>`` (an exported copy of
another commit: ``git archive HEAD src | tar -x -C /tmp/old``, then ``--old /tmp/old/src``) the two
are measured side by side, their runs interleaved so that the machine's load falls on both alike,
and each command's output is compared between them. The load average is printed before and after:
other work on the machine lengthens the wall times, less so the CPU times. The exit code is 0
whatever the figures.

    python scripts/bench_compose.py --old /tmp/old/src     # ~1 minute on 2 cores
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {  # label: (arguments, exit code, target wall seconds or None)
    "dlcomm config": (["config"], 0, 0.6),
    "refusal: dlcomm config optim.lr=-1": (["config", "optim.lr=-1"], 2, 1.0),
    "refusal: dlcomm config algo=nosuch": (["config", "algo=nosuch"], 2, 1.0),
    "dlcomm --help": (["--help"], 0, None),
}
HERE = Path(__file__).resolve().parents[1] / "src"


def measure(args: list[str], src: Path, home: str) -> tuple[float, float, int, bytes]:
    """Wall seconds, CPU seconds, exit code and output (stdout then stderr) of one fresh ``dlcomm``."""
    env = {**os.environ, "PYTHONPATH": str(src), "DLCOMM_HOME": home, "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "dlcomm.cli", *args], cwd=home, env=env, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, process.returncode, out.read() + err.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="fresh processes per command and code (median)")
    parser.add_argument("--old", type=Path, default=None, help="the src folder of the code to compare with")
    parser.add_argument("--new", type=Path, default=HERE, help="the src folder measured (default: this checkout's)")
    options = parser.parse_args()
    codes = {"old": options.old, "new": options.new} if options.old else {"new": options.new}
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())} ({os.cpu_count()} cores) before")
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    outputs: dict[tuple[str, str], set[bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="dlcomm-bench-compose-") as home:
        for code, src in codes.items():  # one unmeasured run each: the bytecode written, the files in the page cache
            for args, _, _ in COMMANDS.values():
                measure(args, src, home)
        for _ in range(options.repeats):
            for label, (args, expected, _) in COMMANDS.items():
                for code, src in codes.items():
                    wall, cpu, exit_code, output = measure(args, src, home)
                    if exit_code != expected:
                        sys.exit(f"`{label}` with {src} exited {exit_code}, not {expected}:\n{output.decode()[-2000:]}")
                    times.setdefault((label, code), []).append((wall, cpu))
                    outputs.setdefault((label, code), set()).add(output.replace(home.encode(), b"<home>"))
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())} after\n")
    header = " | ".join(f"{code} wall | {code} CPU" for code in codes)
    print(f"| median of {options.repeats} (s) | {header} | target | |")
    print("|---|" + "---|---|" * len(codes) + "---|---|")
    for label, (_, _, target) in COMMANDS.items():
        cells = []
        for code in codes:
            walls, cpus = zip(*times[(label, code)])
            cells.append(f"{statistics.median(walls):.2f} | {statistics.median(cpus):.2f}")
        last = statistics.median(wall for wall, _ in times[(label, list(codes)[-1])])
        verdict = "" if target is None else ("PASS" if last <= target else "FAIL")
        print(f"| {label} | {' | '.join(cells)} | {'' if target is None else f'<= {target} s'} | {verdict} |")
    if options.old:
        differ = [label for label in COMMANDS if outputs[(label, "old")] != outputs[(label, "new")]]
        print(
            "\noutputs: "
            + (f"DIFFER for {', '.join(differ)}" if differ else "identical, old and new, for every command")
        )


if __name__ == "__main__":
    main()
