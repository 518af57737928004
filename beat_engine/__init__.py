"""Distributed replacement for celery beat: leases, due heap, batched claims, publish."""
