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

from beat_engine import gc_pauses
from beat_engine.clock import SystemClock
from beat_engine.config import EngineConfig
from beat_engine.engine import BeatEngine
from beat_engine.layout import LayoutMismatch, layout_ensure
from beat_engine.log_format import JsonLineFormatter, TextLineFormatter
from beat_engine.metrics import start_node_exporter
from beat_engine.runtime import build_engine


class Command(BaseCommand):
    help = "Run one node of the distributed beat engine; any number may run at once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--node-id", default=None,
            help="stable name of this node (default: <hostname>-<slot>, the same after a restart)",
        )  # fmt: skip
        parser.add_argument(
            "--slot", type=int, default=None,
            help="this node's number on its host, for the default node id "
            "(default SCHEDULER_NODE_SLOT, 0); one per node on a host",
        )  # fmt: skip
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
        if options["slot"] is not None and options["slot"] < 0:
            raise CommandError("--slot must be 0 or more")
        config = EngineConfig.from_settings(node_id=options["node_id"], slot=options["slot"])
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
        claim_node_id(engine, stop)
        logging.getLogger("beat_engine").info(
            "beat.start",
            extra={"node": config.node_id, "partitions": config.partitions,
                   "lease_ttl_s": config.lease_ttl_s},
        )  # fmt: skip
        # Last before the loop: what is alive now lives as long as the process (docs/engine.md,
        # "Garbage collection").
        gc_pauses.freeze_start_up()
        engine.run(stop)
        logging.getLogger("beat_engine").info("beat.stop", extra={"node": config.node_id})


def claim_node_id(engine: BeatEngine, stop: threading.Event) -> None:
    """Run as the node id only if no other live process does. A node restarted after a crash
    finds its previous process's claim until that expires (one lease TTL) and waits for it;
    a second process started with the id of a running one gives up after that and exits."""
    config = engine.config
    deadline = SystemClock().monotonic() + config.lease_ttl_s + 1.0
    while True:
        holder = engine.ownership.store.claim_node_id(config.node_id, config.lease_ttl_ms)
        if holder is None:
            return
        if stop.is_set() or SystemClock().monotonic() >= deadline:
            raise CommandError(
                f"node id {config.node_id!r} is in use by a running process ({holder}); "
                f"give this node another --node-id or --slot"
            )
        stop.wait(0.2)
