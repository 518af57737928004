"""gunicorn's own log lines follow SCHEDULER_LOG_FORMAT=text; in production they are untouched."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from beat_engine.log_format import TextLineFormatter

CONF = "scheduler_project.gunicorn_conf"


def fresh_conf() -> ModuleType:
    """The config module as gunicorn loads it, read again under the current environment."""
    sys.modules.pop(CONF, None)
    return importlib.import_module(CONF)


@pytest.fixture
def reload_conf(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    # gunicorn's dictConfig also sets the root logger: put the session's back afterwards.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield monkeypatch
    monkeypatch.undo()
    fresh_conf()
    for name in ("gunicorn.error", "gunicorn.access"):
        logging.getLogger(name).handlers.clear()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_text_format_gives_gunicorn_the_text_formatter(reload_conf: pytest.MonkeyPatch) -> None:
    reload_conf.setenv("SCHEDULER_LOG_FORMAT", "text")
    conf = fresh_conf()
    cfg = Config()
    cfg.set("logconfig_dict", conf.logconfig_dict)

    Logger(cfg)

    for name in ("gunicorn.error", "gunicorn.access"):
        handlers = logging.getLogger(name).handlers
        assert [type(h.formatter) for h in handlers] == [TextLineFormatter], name


def test_json_format_leaves_gunicorn_alone(reload_conf: pytest.MonkeyPatch) -> None:
    reload_conf.setenv("SCHEDULER_LOG_FORMAT", "json")
    conf = fresh_conf()

    assert not hasattr(conf, "logconfig_dict")
