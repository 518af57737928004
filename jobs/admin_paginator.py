"""A changelist paginator that never counts a whole table (docs/history.md, "Readers").

Django's paginator counts every matching row to number the pages: on a runs table of tens of
millions of rows that ``count(*)`` took longer than the page itself (bench/bench_history.py).
This one counts at most SMALL + 1 rows, which is exact for a small result; past that it shows
PostgreSQL's own estimate: ``pg_class.reltuples`` for the unfiltered table, the planner's row
estimate (``EXPLAIN``) for a filtered list. The page links are then approximate, and a page
past the real end is just empty; the rows of each page are exact.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

# Up to this many matching rows the count is exact (a bounded count reads at most SMALL + 1).
SMALL = 1_000


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return int(super().count)
        bounded = int(rows[: SMALL + 1].count())
        if bounded <= SMALL:
            return bounded
        return max(bounded, estimated_rows(rows))


# A partitioned table (the runs, docs/history.md, "Partitions") has no reltuples of its own
# that autovacuum keeps: its partitions' are summed (those analysed at least once).
_TABLE_ROWS_SQL = """
SELECT CASE WHEN t.relkind = 'p'
            THEN (SELECT sum(c.reltuples) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = t.oid AND c.reltuples >= 0)
            ELSE t.reltuples END::bigint
  FROM pg_class t WHERE t.oid = to_regclass(%s)
"""


def estimated_rows(rows: QuerySet[Any]) -> int:
    """PostgreSQL's estimate of the rows ``rows`` matches, without reading them."""
    connection = connections[rows.db]
    with connection.cursor() as cursor:
        if not rows.query.where:
            cursor.execute(_TABLE_ROWS_SQL, [rows.model._meta.db_table])
            found = cursor.fetchone()
            # -1 or NULL: never vacuumed or analysed; the planner's estimate below answers.
            if found is not None and found[0] is not None and found[0] >= 0:
                return int(found[0])
        sql, params = rows.order_by().query.sql_with_params()
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()
    assert plan is not None
    document = json.loads(plan[0]) if isinstance(plan[0], str) else plan[0]
    return int(document[0]["Plan"]["Plan Rows"])
