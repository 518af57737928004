"""Headless Chromium for the browser test: found on PATH, or installed from Debian's packages.

The test tooling installs it itself (``apt-get install -y chromium chromium-driver``) when the
binaries are missing and the process may (root, apt-get present). When it cannot, the browser
test is skipped with the reason, except in CI (``CI=true``), where it fails: a browser test
that silently does not run is not a passing one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

PACKAGES = ("chromium", "chromium-driver")
# Debian names the browser `chromium`; other layouts sometimes `chromium-browser`.
_BROWSERS = ("chromium", "chromium-browser")
_INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Chromium:
    browser: str
    driver: str


class ChromiumUnavailable(Exception):
    """Chromium is not installed and could not be installed; str() says why."""


def find() -> Chromium | None:
    browser = next((path for name in _BROWSERS if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    return Chromium(browser, driver) if browser and driver else None


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["apt-get", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=_INSTALL_TIMEOUT_S,
        check=False,
    )


def install() -> Chromium:
    """Install Debian's chromium and chromium-driver; raises ChromiumUnavailable if it cannot."""
    if shutil.which("apt-get") is None:
        raise ChromiumUnavailable("chromium/chromedriver are missing and there is no apt-get")
    if os.geteuid() != 0:
        raise ChromiumUnavailable(
            "chromium/chromedriver are missing; install them as root with "
            "`apt-get install -y chromium chromium-driver`"
        )
    installed = _apt_get("install", "-y", "--no-install-recommends", *PACKAGES)
    if installed.returncode != 0:
        # A fresh image has no package lists yet: fetch them once, then try again.
        _apt_get("update")
        installed = _apt_get("install", "-y", "--no-install-recommends", *PACKAGES)
    found = find()
    if installed.returncode != 0 or found is None:
        tail = (installed.stderr or installed.stdout)[-1500:]
        raise ChromiumUnavailable(f"apt-get install {' '.join(PACKAGES)} failed:\n{tail}")
    return found


def ensure() -> Chromium:
    return find() or install()


def required() -> bool:
    """In CI a browser that cannot be had fails the run instead of skipping it."""
    return os.environ.get("CI") == "true"
