#!/usr/bin/env python
"""A screenshot of the MLflow UI's run list for an experiment, its sweeps expanded: the picture in
docs/mlflow_ui.md. Needs a Chromium (Debian: ``apt-get install chromium``) and the ``playwright``
package (``pip install playwright``; it drives the installed Chromium, nothing is downloaded).

    mlflow server --backend-store-uri sqlite:///results/mlflow.db --port 5055 &
    python scripts/mlflow_ui_screenshot.py --url http://127.0.0.1:5055 --experiment dlcomm --out docs/img/mlflow_sweep_runs.png
"""

from __future__ import annotations

import argparse
import json
import urllib.request


def experiment_id(url: str, name: str) -> str:
    query = urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}", timeout=10)
    return json.load(query)["experiment"]["experiment_id"]


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:5055")
    parser.add_argument("--experiment", default="dlcomm")
    parser.add_argument("--out", default="docs/img/mlflow_sweep_runs.png")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(f"{args.url}/#/experiments/{experiment_id(args.url, args.experiment)}/runs")
        page.wait_for_timeout(6000)
        close = page.get_by_role("button", name="Close")  # the assistant's side panel, when MLflow opens it
        if close.count():
            close.first.click()
        for parent in page.get_by_text("sweep of ").all():  # expand every sweep: the children are its runs
            box = parent.bounding_box()
            page.mouse.click(box["x"] - 32, box["y"] + box["height"] / 2)
            page.wait_for_timeout(1000)
        header = page.get_by_text("Created", exact=True).first.bounding_box()  # widen the run names' column
        x, y = header["x"] - 14, header["y"] + header["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 250, y, steps=10)
        page.mouse.up()
        page.wait_for_timeout(1500)
        page.screenshot(path=args.out)
        browser.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
