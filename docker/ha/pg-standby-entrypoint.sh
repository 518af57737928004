#!/bin/sh
# The standby: on first start, copy the primary with pg_basebackup (-R writes standby.signal and
# primary_conninfo), naming itself "standby" so the primary's synchronous_standby_names waits
# for it; afterwards, start as a hot standby. Promotion is the operator's (or a failover
# manager's) act: `pg_ctl promote` / `SELECT pg_promote()` (docs/operations.md).
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  until pg_isready -h pg-primary -U "$POSTGRES_USER"; do sleep 1; done
  PGPASSWORD="$REPLICATION_PASSWORD" pg_basebackup -D "$PGDATA" \
    -X stream -S standby -R \
    -d "host=pg-primary user=replicator application_name=standby"
  chmod 0700 "$PGDATA"
fi
exec postgres -c hot_standby=on
