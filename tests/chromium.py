"""Load a page in a real headless Chromium; report its DOM, console messages and network requests.

No driver library: Chromium's own switches do the work.

* ``--dump-dom`` prints the DOM after the page has loaded (``--virtual-time-budget`` lets timers and
  late errors run first).
* ``--enable-logging=stderr`` prints every console message (errors, CSP violations, uncaught
  exceptions) as a ``CONSOLE`` line on stderr.
* ``--log-net-log`` writes Chromium's own record of every URL request. Requests the *page* made carry
  the page as their initiator; the browser's background services (component updates, time sync)
  are marked "not an origin" and are not the page's doing. As a second line of defense every
  request is routed to a closed local proxy and every host name resolves to nothing, so no request
  can leave the machine whatever happens.

``.ci/run`` installs Debian's ``chromium`` package. Outside CI, a machine without Chromium skips the
browser tests with the reason; in CI (``CI`` set) a missing Chromium fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell")
QUIET = ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
         "--no-default-browser-check", "--disable-default-apps", "--disable-extensions", "--disable-breakpad",
         "--disable-client-side-phishing-detection", "--disable-domain-reliability", "--no-pings",
         "--metrics-recording-only", "--disable-features=Translate,OptimizationHints,MediaRouter"]


@dataclass
class Page:
    """What the browser saw: the serialized DOM, console lines and the URLs the page requested."""

    dom: str
    console: list[str]
    requests: list[str]


def find_chromium() -> str:
    """The Chromium binary (``$RAPT_AUDIT_CHROMIUM`` or the first on PATH); skips or fails when absent."""
    explicit = os.environ.get("RAPT_AUDIT_CHROMIUM")
    if explicit:
        if not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
            pytest.fail(f"RAPT_AUDIT_CHROMIUM={explicit} is not an executable file")
        return explicit
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    reason = (f"no Chromium found on PATH (looked for {', '.join(CANDIDATES)}); install Debian's chromium package "
              "(apt-get install chromium; .ci/run does this) or set RAPT_AUDIT_CHROMIUM")
    if os.environ.get("CI"):
        pytest.fail(reason + " — CI must run the browser tests")
    pytest.skip(reason)


def _page_requests(netlog: Path) -> list[str]:
    """URLs whose request the page initiated, from Chromium's net log."""
    try:
        doc = json.loads(netlog.read_text(encoding="utf-8"))
    except ValueError:
        # Chromium may leave the closing brackets off when it exits quickly; the events are still whole.
        text = netlog.read_text(encoding="utf-8").rstrip().rstrip(",")
        doc = json.loads(text + ("]}" if not text.endswith("]}") else ""))
    names = {v: k for k, v in doc["constants"]["logEventTypes"].items()}
    urls = []
    for event in doc.get("events", []):
        params = event.get("params") or {}
        if names.get(event.get("type")) != "URL_REQUEST_START_JOB" or "url" not in params:
            continue
        if params.get("initiator") == "not an origin" and "file://" not in str(params.get("network_isolation_key")):
            continue  # the browser's own background service, not the page
        if not params["url"].startswith(("data:", "file:")):
            urls.append(params["url"])
    return urls


def load_page(binary: str, page: Path, *, workdir: Path, timeout: float = 120.0, args: tuple[str, ...] = ()) -> Page:
    """Open ``page`` (a local file) headless and return what the browser saw; ``args`` add switches
    (``--window-size=1280,800``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    netlog = workdir / "netlog.json"
    cmd = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", *QUIET,
           f"--user-data-dir={workdir / 'profile'}", "--enable-logging=stderr", "--v=0",
           "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
           f"--log-net-log={netlog}", "--virtual-time-budget=3000", *args, "--dump-dom", page.resolve().as_uri()]
    env = {**os.environ, "HOME": str(workdir)}  # keep Chromium's crash and config files out of the user's home
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0 or "<html" not in done.stdout.lower():
        raise AssertionError(f"chromium failed (exit {done.returncode}): {done.stderr[-2000:]}")
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Page(done.stdout, console, _page_requests(netlog))
