"""A headless Chromium for opening explorer reports (seq2seq/explorer.py) from disk: what the
browser test and `python -m experiments.explorer_timing` share.

Needs selenium (requirements.txt) and a Chromium with its driver (Debian: `apt-get install
chromium chromium-driver`; `make test` installs them where it can). `missing()` says what is
absent, so callers can skip with that reason.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
DRIVERS = ("chromedriver", "chromium-driver")


def _first_on_path(names: tuple[str, ...]) -> str | None:
  return next((path for path in map(shutil.which, names) if path), None)


def missing() -> str | None:
  """Why no browser can be started here (None when one can)."""
  try:
    import selenium  # noqa: F401
  except ImportError:
    return "selenium is not installed (pip install -r requirements.txt)"
  if _first_on_path(BROWSERS) is None:
    return f"no Chromium on PATH (looked for {', '.join(BROWSERS)}; apt-get install chromium)"
  if _first_on_path(DRIVERS) is None:
    return "no chromedriver on PATH (apt-get install chromium-driver)"
  return None


def start(width: int = 1500, height: int = 1000):
  """A headless Chromium driven by selenium, with a window of `width` x `height` pixels."""
  from selenium import webdriver
  from selenium.webdriver.chrome.options import Options
  from selenium.webdriver.chrome.service import Service

  options = Options()
  options.binary_location = _first_on_path(BROWSERS)
  for arg in (
    "--headless=new",
    "--no-sandbox",  # Containers running as root have no user namespace for the sandbox.
    "--disable-dev-shm-usage",
    "--disable-gpu",
    f"--window-size={width},{height}",
  ):
    options.add_argument(arg)
  return webdriver.Chrome(options=options, service=Service(_first_on_path(DRIVERS)))


def open_report(driver, path: str | Path, timeout_s: float = 60.0) -> float:
  """Opens the report at `path` and waits until its script has built the page; returns the
  milliseconds from navigation start to that point, as the page measured them."""
  driver.get(Path(path).resolve().as_uri())
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if driver.execute_script("return document.documentElement.dataset.ready === '1'"):
      return float(driver.execute_script("return window.reportLoadMs"))
    time.sleep(0.05)
  raise TimeoutError(f"{path} did not finish building in {timeout_s:.0f} s")
