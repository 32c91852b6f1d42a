"""Re-make the README's screenshot: the quickstart's HTML report, rendered in headless
Chromium (Debian's ``chromium`` driven by Playwright), top of the page.

    python scripts/report_screenshot.py results/quickstart docs/report-screenshot.png

(``make screenshot`` after ``make demo``). The report is written fresh from the results
folder first, so the picture always shows the current report code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from evalq.report.page import write_report

    chromium = os.environ.get("EVALQ_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        print("needs Debian's chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        html = write_report([args.results], Path(tmp) / "report.html")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium,
                                        args=["--disable-gpu", "--no-first-run"])
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(html.resolve().as_uri())
            page.wait_for_function(
                "document.documentElement.getAttribute('data-rendered') !== null",
                timeout=120_000)
            page.wait_for_timeout(500)
            args.png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.png), full_page=False)
            browser.close()
    print(f"screenshot written to {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
