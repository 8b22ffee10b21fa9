"""Headless Chromium for the phone app's tests (Playwright driving Debian's /usr/bin/chromium).

`python -m tests.browser` installs what the tests need when it is missing: Debian's chromium (as root,
with apt-get) for the browser tests, and the real ACP agents for tests/system/test_acp_real.py (tests/agents.py:
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


# Debian packages the browser tests use beside Chromium, by the program each provides: `certutil` puts the lead's
# certificate authority into a browser's NSS database (tests/system/test_trust.py), `caddy` is the TLS-terminating proxy
# in front of a lead with --public-url (issue 35).
TOOLS = {"certutil": "libnss3-tools", "caddy": "caddy"}


def missing() -> list[str]:
    """The Debian packages still to install: chromium (unless COLLIE_CHROMIUM names one) and the TOOLS."""
    want = [] if os.path.exists(CHROMIUM) else ["chromium"]
    return want + [pkg for prog, pkg in TOOLS.items() if shutil.which(prog) is None]


def ensure() -> int:
    packages = missing()
    if not packages:
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"the browser tests need Debian's {' '.join(packages)} (sudo apt-get install {' '.join(packages)}; "
              f"or set COLLIE_CHROMIUM for Chromium)", file=sys.stderr)
        return 1
    print(f"installing Debian's {' '.join(packages)} for the browser tests (about a minute)…", file=sys.stderr,
          flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    from tests import agents

    sys.exit(ensure() or agents.ensure())
