#!/usr/bin/env python3
"""Run a long, quiet command and never leave a silent stretch: ``make setup``'s pip installs.

    python3 scripts/heartbeat.py [--every S] [--show REGEX] -- COMMAND ...

Prints the command's output lines that match ``--show`` (all when not given) as they come, and,
whenever ``--every`` seconds (10) pass without a printed line, one line saying how long it has run
and the last thing it wrote (pip downloading a wheel of a few GB, or unpacking it, prints nothing
for minutes). Exits with the command's exit status. Standard library only: it runs before the
virtual environment exists.
"""

from __future__ import annotations

import argparse
import queue
import re
import subprocess
import sys
import threading
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=10.0, help="seconds of silence before a line (10)")
    parser.add_argument("--show", default="", help="print only the output lines matching this regular expression")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    show = re.compile(args.show) if args.show else None
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()
    output = process.stdout
    assert output is not None  # stdout=PIPE

    def read() -> None:
        for line in output:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    began = last_said = time.monotonic()
    last = ""
    while True:
        try:
            line = lines.get(timeout=max(0.1, args.every - (time.monotonic() - last_said)))
        except queue.Empty:
            what = f": {last.strip()[:100]}" if last.strip() else ""
            print(f"  ... {time.monotonic() - began:.0f} s, still working (last{what or ': nothing yet'})", flush=True)
            last_said = time.monotonic()
            continue
        if line is None:
            break
        last = line or last
        if show is None or show.search(line):
            print(line, flush=True)
            last_said = time.monotonic()
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
