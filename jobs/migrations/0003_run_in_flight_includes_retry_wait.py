# The concurrency policy counts a run waiting to retry as in flight; its index covers it too.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0002_drop_redundant_indexes'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='jobrun',
            name='run_in_flight_by_job',
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(condition=models.Q(('state__in', ['queued', 'running', 'retry_wait'])), fields=['job'], name='run_in_flight_by_job'),
        ),
    ]
