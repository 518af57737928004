"""Side-by-side benchmark: our beat engine against celery beat, django-celery-beat and RedBeat."""
