"""Headless Chromium for the phone app's tests (Playwright driving Debian's /usr/bin/chromium).

`python -m tests.browser` installs what the tests need when it is missing: Debian's chromium (as root,
with apt-get) for the browser tests, and the real ACP agents for tests/test_acp_real.py (tests/agents.py:
Node from Debian's packages where missing, the pinned npm packages into tests/.agents/). The README's
test command and .ci/run call it before pytest, so CI runs these tests on a fresh machine instead of
skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

CHROMIUM = os.environ.get("COLLIE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def launch(playwright):
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"no Chromium at {CHROMIUM}: run `python -m tests.browser` (installs Debian's chromium)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)


def ensure() -> int:
    if os.path.exists(CHROMIUM):
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"the browser tests need Chromium at {CHROMIUM}: install Debian's `chromium` package "
              "(sudo apt-get install chromium) or set COLLIE_CHROMIUM", file=sys.stderr)
        return 1
    print("installing Debian's chromium for the browser tests (about a minute)…", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    from tests import agents

    sys.exit(ensure() or agents.ensure())
