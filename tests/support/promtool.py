"""promtool, from Debian's `prometheus` package, fetched by the test tooling when missing.

Only the promtool binary is needed, so the package is downloaded with apt-get and unpacked into
.local/tools/ rather than installed: installing it would also start a Prometheus server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / ".local" / "tools" / "promtool"


class PromtoolMissing(RuntimeError):
    pass


def _download(workdir: Path) -> Path:
    for attempt in range(2):
        fetched = subprocess.run(
            ["apt-get", "download", "prometheus"], cwd=workdir, capture_output=True, text=True
        )
        if fetched.returncode == 0:
            break
        if attempt or os.geteuid() != 0:
            raise PromtoolMissing(f"apt-get download prometheus failed: {fetched.stderr.strip()}")
        # A fresh machine may have no package lists yet.
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
    debs = sorted(workdir.glob("prometheus_*.deb"))
    if not debs:
        raise PromtoolMissing("apt-get download prometheus left no package")
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(workdir / "x")], check=True)
    binary = workdir / "x" / "usr" / "bin" / "promtool"
    if not binary.exists():
        raise PromtoolMissing("the prometheus package holds no usr/bin/promtool")
    return binary


def promtool() -> Path:
    """The promtool to run: on PATH, already fetched, or fetched now; PromtoolMissing if none."""
    found = shutil.which("promtool")
    if found:
        return Path(found)
    if LOCAL.exists():
        return LOCAL
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise PromtoolMissing("promtool is not installed and apt-get/dpkg-deb are not available")
    LOCAL.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=LOCAL.parent) as tmp:
        # Readable by apt's unprivileged download user, which otherwise warns and falls back.
        os.chmod(tmp, 0o777)
        binary = _download(Path(tmp))
        staged = LOCAL.with_suffix(".tmp")
        shutil.copy2(binary, staged)
        # Atomic, so two test sessions fetching at once never run a half-written binary.
        os.replace(staged, LOCAL)
    return LOCAL
