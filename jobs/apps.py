"""App configuration for the jobs app."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Scheduled jobs"

    def ready(self) -> None:
        from django.db.models.signals import pre_delete

        from jobs import checks  # noqa: F401  (registers system checks)
        from jobs.models import Job
        from jobs.services.run_results import results_delete_for_job

        # A job's runs go by cascade; their stored attempt results go with them.
        pre_delete.connect(results_delete_for_job, sender=Job, dispatch_uid="job_results")
        from jobs.registry import load_client_modules

        load_client_modules()
