"""Collie installs as one name, `collie` (issue 41): nothing generic lands beside the user's packages."""

from __future__ import annotations

import subprocess
import sys


def test_collie_installs_beside_pypis_fixtures(tmp_path):
    """Installing Collie adds one top-level name, `collie`: PyPI's `fixtures` (testtools), which the testing
    kit's users often have, imports beside Collie's kit in one interpreter."""
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path),
                          "fixtures==4.3.2"], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    code = ("import fixtures, collie.fixtures.member as kit; from fixtures import Fixture; "
            "print(fixtures.__file__, kit.FakeMember.__name__, Fixture.__name__)")
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr
    where, member, fixture = ran.stdout.split()
    assert where.startswith(str(tmp_path)) and (member, fixture) == ("FakeMember", "Fixture")
