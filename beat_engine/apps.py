"""Django app for the engine, so that its management command lives beside the engine.

The `jobs` app must not import the engine's adapters (an import-linter contract), so the
`beat_engine` command belongs here rather than in `jobs/management/commands/`.
"""

from django.apps import AppConfig


class BeatEngineConfig(AppConfig):
    name = "beat_engine"
    verbose_name = "Beat engine"
