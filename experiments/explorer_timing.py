"""Size and load time of an explorer report (seq2seq/explorer.py) in headless Chromium.

  python -m experiments.explorer_timing runs/demo/eval/test/report.html --loads 5 \
      --screenshot docs/explorer.png --select 12 \
      [--json experiments/results/explorer_timing/timing.json]

Opens the file from disk `--loads` times (a fresh page each time) and prints its size and the
median milliseconds from navigation start until the page's script has built the table and
drawn the first sentence (`window.reportLoadMs`), then the time to sort by sentence BLEU.
`--screenshot` saves a picture of the page with sentence `--select` drawn; `--json` writes the
figures with the machine they were measured on (CPU, load average, versions). Needs selenium and a
Chromium with its driver (experiments/lib/browser.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.lib import browser, reports


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("report", type=Path, help="a report.html (or compare_*.html)")
  parser.add_argument("--loads", type=int, default=5, help="page loads to take the median of")
  parser.add_argument("--screenshot", type=Path, default=None, help="PNG to save")
  parser.add_argument("--select", type=int, default=0, help="sentence drawn in the screenshot")
  parser.add_argument("--width", type=int, default=1500)
  parser.add_argument("--height", type=int, default=1000)
  parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
  args = parser.parse_args(argv)
  if (why := browser.missing()) is not None:
    raise SystemExit(f"error: {why}")
  driver = browser.start(args.width, args.height)
  try:
    loads = [browser.open_report(driver, args.report) for _ in range(args.loads)]
    header = driver.find_element("css selector", '#sentence-table th[data-key="bleu"]')
    start = time.perf_counter()
    header.click()
    driver.execute_script("return document.querySelectorAll('#sentence-table tbody tr').length")
    sort_ms = (time.perf_counter() - start) * 1e3
    count = driver.execute_script(
      "return JSON.parse(document.getElementById('report-data').textContent).sentences[0].length"
    )
    size = args.report.stat().st_size
    each = ", ".join(f"{x:.0f}" for x in loads)
    print(
      f"{args.report}: {count:,} sentences, {size / 1e6:.1f} MB, load "
      f"{statistics.median(loads):.0f} ms (median of {len(loads)}: {each}), sort by BLEU "
      f"{sort_ms:.0f} ms (with the driver's round trip)"
    )
    if args.json:
      record = {
        "report": str(args.report),
        "sentences": count,
        "bytes": size,
        "load_ms": loads,
        "load_ms_median": statistics.median(loads),
        "sort_by_bleu_ms": sort_ms,
        "browser": driver.capabilities.get("browserVersion"),
        **reports.environment(),
      }
      reports.write_json(args.json, record)
    if args.screenshot:
      browser.open_report(driver, args.report)
      driver.execute_script(
        "const row = document.querySelector(`#sentence-table tr[data-index='${arguments[0]}']`);"
        "row.click(); row.parentElement.closest('.table-wrap').scrollTop = row.offsetTop - 150;",
        args.select,
      )
      args.screenshot.parent.mkdir(parents=True, exist_ok=True)
      driver.save_screenshot(str(args.screenshot))
      print(f"screenshot: {args.screenshot}")
  finally:
    driver.quit()


if __name__ == "__main__":
  main()
