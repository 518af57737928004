"""App configuration for the jobs app."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Scheduled jobs"

    def ready(self) -> None:
        from jobs import checks  # noqa: F401  (registers system checks)
        from jobs.registry import load_client_modules

        load_client_modules()
