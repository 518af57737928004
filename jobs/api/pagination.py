"""Keyset (cursor) pagination, newest first, with next/previous links.

A page is `WHERE (key) < (cursor) ORDER BY key DESC LIMIT n+1`, which an index on the key
answers without counting or skipping rows: page 10,000 costs what page 1 costs. OFFSET would
make deep pages scan everything before them.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from django.db.models import Model, Q, QuerySet
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from jobs.errors import InvalidInput

M = TypeVar("M", bound=Model)
DEFAULT_LIMIT = 20
MAX_LIMIT = 200
# The cursors this API writes are under 200 characters; a longer one is not ours.
MAX_CURSOR = 1024


def _aware(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    if value.utcoffset() is None:
        raise ValueError("naive instant in cursor")
    return value


_PARSERS: dict[str, Callable[[str], Any]] = {
    "datetime": _aware,
    "uuid": uuid.UUID,
    "int": int,
}


@dataclass(frozen=True)
class KeyField:
    name: str
    kind: str  # a key of _PARSERS


@dataclass(frozen=True)
class Page(Generic[M]):
    items: list[M]
    next: str | None
    previous: str | None


def _encode(values: Sequence[Any], backwards: bool) -> str:
    raw = json.dumps({"k": [str(v) for v in values], "b": backwards}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, keys: Sequence[KeyField]) -> tuple[list[Any], bool]:
    """The position a cursor of ours holds; anything else is a 400 naming ``cursor``.

    A cursor is client input like any other: it may be long, nested thousands deep (json.loads
    then raises RecursionError, not ValueError), or hold values of the wrong JSON type, which
    the parsers would answer with AttributeError or TypeError.
    """
    try:
        if len(cursor) > MAX_CURSOR:
            raise ValueError("cursor too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("b"), bool):
            raise ValueError("not a cursor object")
        texts = data.get("k")
        if not isinstance(texts, list) or len(texts) != len(keys):
            raise ValueError("wrong number of keys")
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("keys must be strings")
        values = [_PARSERS[k.kind](text) for k, text in zip(keys, texts, strict=True)]
        return values, data["b"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidInput("cursor", "is not a cursor this API returned") from None


def _beyond(keys: Sequence[KeyField], values: Sequence[Any], lookup: str) -> Q:
    """Row-value comparison (k1, k2) < (v1, v2) spelled as OR of ANDs for the ORM."""
    condition = Q()
    for i, key in enumerate(keys):
        equal = {keys[j].name: values[j] for j in range(i)}
        condition |= Q(**equal, **{f"{key.name}__{lookup}": values[i]})
    return condition


def parse_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidInput("limit", f"must be a whole number from 1 to {MAX_LIMIT}")
    return int(raw)


# The filters a page is read through, in the page's order, given the cursor's first key (None
# on a first page) and whether the page goes backwards: disjoint, together the whole range.
Windows = Callable[[Any, bool], Sequence[Q]]


def paginate(
    queryset: QuerySet[M],
    request: Request,
    keys: Sequence[KeyField],
    windows: Windows | None = None,
) -> Page[M]:
    """One page of ``queryset`` in descending key order; the last key must be unique.

    With ``windows``, the page is read window by window until it is full: each query then
    names a narrower range (jobs/run_windows.py says why that matters for the runs)."""
    limit = parse_limit(request.query_params.get("limit"))
    cursor = request.query_params.get("cursor")
    descending = [f"-{k.name}" for k in keys]
    backwards = False
    position = None
    if cursor:
        values, backwards = _decode(cursor, keys)
        position = values[0]
        lookup = "gt" if backwards else "lt"
        queryset = queryset.filter(_beyond(keys, values, lookup))
    ordering = [k.name for k in keys] if backwards else descending
    if windows is None:
        rows = list(queryset.order_by(*ordering)[: limit + 1])
    else:
        rows = []
        for window in windows(position, backwards):
            rows += queryset.filter(window).order_by(*ordering)[: limit + 1 - len(rows)]
            if len(rows) > limit:
                break
    more = len(rows) > limit
    rows = rows[:limit]
    if backwards:
        rows.reverse()

    def link(row: M, to_back: bool) -> str:
        position = [row[k.name] if isinstance(row, dict) else getattr(row, k.name) for k in keys]
        url = request.build_absolute_uri()
        return replace_query_param(url, "cursor", _encode(position, to_back))

    has_next = (more and not backwards) or (backwards and bool(rows))
    has_previous = (more and backwards) or (bool(cursor) and not backwards and bool(rows))
    return Page(
        items=rows,
        next=link(rows[-1], False) if has_next and rows else None,
        previous=link(rows[0], True) if has_previous and rows else None,
    )
