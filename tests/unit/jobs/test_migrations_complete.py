"""The models and the migrations agree: the autodetector behind `makemigrations` finds nothing.

A model change committed without its migration would be applied by nobody; a migration that
deconstructs differently from its model (an index condition's terms in another order) makes
the next `makemigrations` write a spurious drop-and-create.
"""

from __future__ import annotations

from django.apps import apps
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.questioner import NonInteractiveMigrationQuestioner
from django.db.migrations.state import ProjectState


def test_the_migrations_describe_the_models() -> None:
    # No connection: the loader reads the migration files only.
    loader = MigrationLoader(None, ignore_no_migrations=True)
    autodetector = MigrationAutodetector(
        loader.project_state(),
        ProjectState.from_apps(apps),
        NonInteractiveMigrationQuestioner(specified_apps=None, dry_run=True),
    )
    changes = autodetector.changes(graph=loader.graph)
    described = {
        app: [op.describe() for migration in migrations for op in migration.operations]
        for app, migrations in changes.items()
    }
    assert described == {}
