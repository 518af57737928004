"""Jobs, runs, dedup keys and dead letters: the scheduler's data and its services."""
