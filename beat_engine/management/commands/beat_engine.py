"""Run one beat engine node until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from beat_engine.config import EngineConfig
from beat_engine.layout import LayoutMismatch, layout_ensure
from beat_engine.log_format import JsonLineFormatter, TextLineFormatter
from beat_engine.metrics import start_node_exporter
from beat_engine.runtime import build_engine


class Command(BaseCommand):
    help = "Run one node of the distributed beat engine; any number may run at once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--node-id", default=None, help="stable name of this node")
        parser.add_argument(
            "--metrics-port", type=int, default=None,
            help="serve Prometheus metrics on this port of SCHEDULER_METRICS_ADDR "
            "(default SCHEDULER_BEAT_METRICS_PORT; 0: none); one port per node",
        )  # fmt: skip
        parser.add_argument(
            "--log-format", choices=["json", "text"], default=settings.SCHEDULER_LOG_FORMAT,
            help="json: one object per line with the event's fields; text: one readable line "
            "per event (default: SCHEDULER_LOG_FORMAT)",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        handler = logging.StreamHandler(sys.stderr)
        formatter = JsonLineFormatter() if options["log_format"] == "json" else TextLineFormatter()
        handler.setFormatter(formatter)
        engine_logger = logging.getLogger("beat_engine")
        engine_logger.addHandler(handler)
        engine_logger.setLevel(logging.INFO)
        engine_logger.propagate = False
        config = EngineConfig.from_settings(node_id=options["node_id"])
        try:
            # Jobs in partitions this engine does not know would never fire: refuse to start.
            layout_ensure(config.partitions)
        except LayoutMismatch as exc:
            raise CommandError(str(exc)) from None
        stop = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        start_node_exporter(options["metrics_port"])
        engine = build_engine(config)
        logging.getLogger("beat_engine").info(
            "beat.start",
            extra={"node": config.node_id, "partitions": config.partitions,
                   "lease_ttl_s": config.lease_ttl_s},
        )  # fmt: skip
        engine.run(stop)
        logging.getLogger("beat_engine").info("beat.stop", extra={"node": config.node_id})
