"""Production settings pass Django's deployment checks; the local defaults would not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check_deploy(extra_env: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **extra_env}
    env = {key: value for key, value in env.items() if value is not None}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_passes_with_production_settings() -> None:
    result = _check_deploy(
        {
            "DJANGO_SECRET_KEY": "x7!" + "kq3Zr9vLp2Wm8Tn4Yb6Hd1Fs5Gj0Ac" * 2,
            "DJANGO_SECURE": "true",
            "DJANGO_DEBUG": "false",
            "DJANGO_ALLOWED_HOSTS": "scheduler.example.com",
        }
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_deploy_flags_the_development_defaults() -> None:
    result = _check_deploy({"DJANGO_SECURE": "false"})
    assert result.returncode != 0
    assert "security.W012" in result.stdout + result.stderr


def test_check_deploy_refuses_the_development_secret_key() -> None:
    result = _check_deploy(
        {"DJANGO_SECRET_KEY": None, "DJANGO_SECURE": "true", "DJANGO_DEBUG": "false"}
    )
    assert result.returncode != 0
    assert "jobs.E005" in result.stdout + result.stderr
