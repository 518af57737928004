#!/bin/sh
# Runs once, when the primary's data directory is created (docker-entrypoint-initdb.d): the
# standby's replication role, a physical slot so the primary keeps the WAL the standby still
# needs, and pg_hba entries for replication from the compose network.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '${REPLICATION_PASSWORD}';
SELECT pg_create_physical_replication_slot('standby');
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
