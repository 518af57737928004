"""How the browser test gets its Chromium: found, installed, or a clear reason (fails in CI)."""

from __future__ import annotations

import pytest

from tests.browser import chromium


def test_nothing_found_on_an_empty_path(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium.find() is None


def test_without_root_it_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chromium.shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(chromium.os, "geteuid", lambda: 1000)
    with pytest.raises(chromium.ChromiumUnavailable, match="apt-get install -y chromium"):
        chromium.install()


def test_without_apt_get_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chromium.shutil, "which", lambda name: None)
    with pytest.raises(chromium.ChromiumUnavailable, match="no apt-get"):
        chromium.install()


@pytest.mark.parametrize(("ci", "required"), [("true", True), ("", False), ("1", False)])
def test_ci_requires_the_browser(monkeypatch: pytest.MonkeyPatch, ci: str, required: bool) -> None:
    monkeypatch.setenv("CI", ci)
    assert chromium.required() is required
