#!/usr/bin/env python
"""Screenshots of the MLflow UI as dlcomm's printed links open it: the pictures in docs/mlflow_ui.md.

A real browser (Chromium, driven by Playwright) opens, in a fresh profile (no remembered choice of
the UI's side, no saved view):

* ``first``: the newest sweep's parent run (or ``--run``'s) at the address dlcomm printed at the
  sweep's end (:func:`dlcomm.tracking.ui.run_page`), as it opens: the description's first two
  lines (the UI folds it there; nothing a client sets unfolds it), the comparison's headline;
* ``sweep``: the same page after ONE click on the description's ``Show more``;
* ``grouped``: the link ``grouped by method`` in that description: the experiment's runs list as
  dlcomm's shared view sets it (the sweep's children grouped by the ``algo`` tag, ``summary/*``
  columns);
* ``run``: one child run's page (the address a single run prints at its end), ``Show more``
  clicked;
* ``bare``: the experiment page as MLflow's own home page links it (no query): for the record of
  what the UI does without dlcomm's links.

MLflow 3 opens its assistant side panel once per browser profile when the page's host is
``localhost``, ``127.0.0.1`` or ``::1`` (a decision of the UI's JavaScript, kept in the browser's
local storage key ``mlflow.assistant.fab.autoOpenedOnFirstLoad``; no server flag or environment
variable turns it off: docs/mlflow_ui.md); it is closed (its ``Close`` button) before each picture,
as a user closes it once. Each PNG is cropped to ``--height`` and kept under ``--max-kb``.

Needs a Chromium (Debian: ``apt-get install chromium``) and the ``playwright`` package (``pip
install playwright`` into the venv, or ``--target`` a folder on ``PYTHONPATH``; not a dlcomm dependency; it drives ``/usr/bin/chromium``, no
browser is downloaded). Pillow (a dlcomm dependency through matplotlib) crops the PNGs.

    MLFLOW_DISABLE_TELEMETRY=true .venv/bin/mlflow ui --backend-store-uri sqlite:////tmp/uisweep/results/mlflow.db --port 5000 --workers 1 &
    python scripts/mlflow_ui_screenshot.py --url http://127.0.0.1:5000 --out-dir docs/img
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

SHOTS = ("first", "sweep", "grouped", "run", "bare")
FILES = {name: f"mlflow_{name}.png" for name in SHOTS}


def api(url: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def search(url: str, experiment: str, filter_string: str) -> dict:
    body = {"experiment_ids": [experiment], "filter": filter_string, "order_by": ["attributes.start_time DESC"]}
    return api(url, "runs/search", {**body, "max_results": 1})["runs"][0]


def close_assistant(page) -> None:
    try:
        page.get_by_role("button", name="Close").first.click(timeout=2000)  # MLflow 3's assistant panel
        page.wait_for_timeout(500)
    except Exception:  # noqa: BLE001 - no panel this time
        pass


def show_more(page) -> None:
    more = page.get_by_text("Show more", exact=True)
    if more.count():
        more.first.click()
        page.wait_for_timeout(2000)


def save(png: bytes, out: Path, height: int, max_kb: int) -> None:
    """Crop to the top ``height`` pixels and shrink until the file is under ``max_kb``."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image = image.crop((0, 0, image.width, min(image.height, height)))
    while True:
        buffer = io.BytesIO()
        image.save(buffer, "PNG", optimize=True)
        if buffer.tell() <= max_kb * 1024 or image.width < 800:
            break
        image = image.resize((int(image.width * 0.9), int(image.height * 0.9)), Image.Resampling.LANCZOS)
    out.write_bytes(buffer.getvalue())
    print(f"wrote {out} ({image.width}x{image.height}, {buffer.tell() // 1024} KB)")


def main() -> int:
    from playwright.sync_api import sync_playwright

    from dlcomm.tracking.ui import run_page

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:5000")
    parser.add_argument("--experiment", default="dlcomm")
    parser.add_argument("--run", default="", help="the sweep's parent run (default: the newest)")
    parser.add_argument("--out-dir", default="docs/img")
    parser.add_argument("--shots", default=",".join(SHOTS), help=f"a comma list of {', '.join(SHOTS)}")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument(
        "--width", type=int, default=1600, help="the browser's width (a laptop screen: the first screen a user sees)"
    )
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--max-kb", type=int, default=400)
    args = parser.parse_args()
    shots = [shot for shot in args.shots.split(",") if shot]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    query = urllib.parse.urlencode({"experiment_name": args.experiment})
    experiment = api(args.url, f"experiments/get-by-name?{query}")["experiment"]["experiment_id"]
    parent = args.run or search(args.url, experiment, "tags.sweep = 'true'")["info"]["run_id"]
    child = search(args.url, experiment, f"tags.mlflow.parentRunId = '{parent}'")["info"]["run_id"]
    sweep_page = run_page(args.url, experiment, parent)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_context(viewport={"width": args.width, "height": args.height}).new_page()

        def visit(address: str) -> float:
            began = time.monotonic()
            page.goto(address)
            page.wait_for_timeout(5000)
            close_assistant(page)
            return time.monotonic() - began

        if {"first", "sweep", "grouped"} & set(shots):
            visit(sweep_page)
            if "first" in shots:
                save(page.screenshot(), out_dir / FILES["first"], args.height, args.max_kb)
            show_more(page)
            if "sweep" in shots:
                save(page.screenshot(), out_dir / FILES["sweep"], args.height, args.max_kb)
            if "grouped" in shots:
                # the description's link; the UI opens a description's links in a new tab
                with page.context.expect_page() as opened:
                    page.get_by_role("link", name="grouped by method").first.click()
                tab = opened.value
                tab.wait_for_load_state()
                tab.wait_for_timeout(5000)
                close_assistant(tab)
                save(tab.screenshot(), out_dir / FILES["grouped"], args.height, args.max_kb)
                tab.close()
        if "run" in shots:
            visit(run_page(args.url, experiment, child))
            show_more(page)
            save(page.screenshot(), out_dir / FILES["run"], args.height, args.max_kb)
        if "bare" in shots:
            visit(f"{args.url}/#/experiments/{experiment}")
            save(page.screenshot(), out_dir / FILES["bare"], args.height, args.max_kb)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
