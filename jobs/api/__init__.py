"""REST API v1: tenant-scoped jobs, runs, dead letters and schedule previews."""
