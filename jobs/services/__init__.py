"""Service functions: every write to jobs and runs goes through these."""
