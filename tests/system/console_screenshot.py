"""The picture of the web console in the README:
``python tests/system/console_screenshot.py [--out docs/console.png]``.

It does what a person would: starts ``seqsketch serve`` (gunicorn and its job runner) on a loopback port with
a fresh home, builds BPI 2012 through the API, opens the console in the system's headless Chromium, picks the
dataset, asks a frequent per-case question (its first 100 matches drawn; where all 29,248 lie, in the strip
beneath them), opens a match, and takes the screenshot.  With ``--summaries`` it asks for a funnel, what
comes next and the durations of a pair instead, and puts their three charts in one picture
(``docs/console-summaries.png``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO)]

QUESTION = "PATTERN SEQ('W_Completeren aanvraag' c, 'W_Nabellen offertes' n) PARTITION BY case WITHIN 30 days"
SUMMARIES = ("PATTERN SEQ(A_SUBMITTED submitted, O_SENT offered, O_ACCEPTED accepted, A_APPROVED approved) "
             "PARTITION BY case WITHIN 30 days RETURN funnel",
             "PATTERN SEQ(O_CANCELLED cancelled) PARTITION BY case RETURN next 1",
             "PATTERN SEQ(O_SENT offered, O_SENT_BACK returned) PARTITION BY case RETURN durations")


def main() -> int:
    from playwright.sync_api import sync_playwright

    from api.client import Client
    from api.service import shared_data_dirs
    from bench.load import served
    from tests.system.test_console_browser import ARGS, CHROMIUM

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(REPO / "docs" / "console.png"))
    parser.add_argument("--match", type=int, default=2, help="which match to open (0-based)")
    parser.add_argument("--summaries", action="store_true", help="a funnel, what comes next and durations")
    args = parser.parse_args()
    if args.summaries and args.out == str(REPO / "docs" / "console.png"):
        args.out = str(REPO / "docs" / "console-summaries.png")
    data = next(d for d in shared_data_dirs() if (d / "bpic2012.xes.gz").is_file())
    with tempfile.TemporaryDirectory(prefix="seqsketch-shot-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        with served(home, server="gunicorn", workers=2, env={"SEQSKETCH_INPUT_ROOTS": str(data)}) as url:
            client = Client(url, timeout=120)
            client.wait(client.build("bpi2012", ["bpic2012.xes.gz"], engine="local")["job_id"], timeout=600)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch_persistent_context(
                    str(Path(tmp) / "profile"), executable_path=str(CHROMIUM), args=ARGS, headless=True,
                    viewport={"width": 1440, "height": 1200}, device_scale_factor=1)
                page = browser.new_page()
                page.goto(url + "/")
                page.click("#datasets li[data-name='bpi2012']")
                page.wait_for_function(
                    "() => document.querySelector('#info-title').textContent === 'bpi2012'")
                if args.summaries:
                    shots = []
                    for i, question in enumerate(SUMMARIES):
                        page.fill("#query", question)
                        page.click("#run")
                        page.wait_for_selector(".summary-chart svg.chart")
                        page.wait_for_function("() => document.querySelector('#run').textContent === 'Run query'")
                        shot = Path(tmp) / f"part-{i}.png"
                        page.locator("#match-list").screenshot(path=str(shot))
                        shots.append(shot)
                    _stack(shots, Path(args.out))
                else:
                    page.fill("#query", QUESTION)
                    page.click("#run")
                    page.wait_for_selector("#timeline rect.match")
                    page.click(f"#match-list tbody tr[data-i='{args.match}']")
                    page.wait_for_selector("#match-detail table tbody tr")
                    page.mouse.move(0, 0)
                    page.wait_for_timeout(300)
                    page.screenshot(path=args.out, full_page=False)
                browser.close()
    print(f"wrote {args.out}")
    return 0


def _stack(shots: list[Path], out: Path) -> None:
    """The pictures one above the other, in one PNG (matplotlib reads and writes them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import numpy as np

    images = [mpimg.imread(str(p)) for p in shots]
    width = max(i.shape[1] for i in images)
    padded = [np.pad(i, ((0, 8), (0, width - i.shape[1]), (0, 0)), constant_values=1.0) for i in images]
    mpimg.imsave(str(out), np.concatenate(padded, axis=0))


if __name__ == "__main__":
    sys.exit(main())
