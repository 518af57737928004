"""The operator's status pages under /status/: overview, job and run pages, server-drawn charts."""
