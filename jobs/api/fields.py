"""Serializer fields with the API's conventions: strict instants, seconds, storable JSON."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import QueryDict
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

# A bound on durations given in seconds, only so that no input can overflow a timedelta; the
# services apply the real limits (timeouts, delays, intervals) with their own messages.
MAX_SECONDS = 100_000_000


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects fields it does not know, instead of silently dropping a client's typo."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages such as "must be a string"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else.

    DRF's CharField stores ``123`` as ``"123"`` and ``1.5`` as ``"1.5"``; a client sending a
    number where a name belongs has a bug, and silently storing its string form hides it.
    """

    default_error_messages = {  # noqa: RUF012 - DRF reads this as a class attribute
        **serializers.CharField.default_error_messages,
        "wrong_type": "must be a string, not a {kind}",
    }

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("wrong_type", kind=json_type(data))
        return str(super().to_internal_value(data))


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: not ``"5"``, ``5.0`` or ``true``, which DRF's IntegerField accepts."""

    default_error_messages = {  # noqa: RUF012 - DRF reads this as a class attribute
        **serializers.IntegerField.default_error_messages,
        "wrong_type": "must be a whole number, not a {kind}",
    }

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            kind = json_type(data)
            self.fail("wrong_type", kind="fraction" if isinstance(data, float) else kind)
        return int(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false: not ``"yes"``, ``"false"`` or ``1``, which DRF's BooleanField maps."""

    default_error_messages = {  # noqa: RUF012 - DRF reads this as a class attribute
        **serializers.BooleanField.default_error_messages,
        "wrong_type": "must be true or false, not a {kind}",
    }

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("wrong_type", kind=json_type(data))
        return data


class StrictUUIDField(serializers.UUIDField):
    """A JSON string holding a UUID: not the integer DRF's UUIDField would turn into one."""

    default_error_messages = {  # noqa: RUF012 - DRF reads this as a class attribute
        **serializers.UUIDField.default_error_messages,
        "wrong_type": "must be a string holding a job id, not a {kind}",
    }

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("wrong_type", kind=json_type(data))
        return super().to_internal_value(data)


class StrictQuery(StrictSerializer):
    """Query parameters: unknown, empty and repeated ones are refused, each by name.

    DRF treats ``?status=`` on an optional field as "not given", so a client whose variable was
    empty would silently list everything; and ``?status=a&status=b`` would keep only the last.
    """

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, QueryDict):
            errors: dict[str, list[str]] = {}
            for name in data:
                values = data.getlist(name)
                if len(values) > 1:
                    errors[str(name)] = ["is given more than once"]
                elif values[0] == "":
                    errors[str(name)] = ["must not be empty; leave the parameter out instead"]
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an offset on input; UTC with 'Z' on output. A naive instant is refused
    rather than guessed, because a wrong guess fires a job hours early or late."""

    default_error_messages = {  # noqa: RUF012 - DRF reads this as a class attribute
        **serializers.DateTimeField.default_error_messages,
        "naive": "must include a UTC offset, for example 2026-01-01T09:00:00Z",
    }

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)

    def to_representation(self, value: datetime | None) -> Any:
        return None if value is None else utc_iso(value)


def utc_iso(value: datetime) -> str:
    """The API's one spelling of an instant: UTC, ISO 8601, 'Z'."""
    return value.astimezone(UTC).isoformat().removesuffix("+00:00") + "Z"


def seconds(value: int | float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


@extend_schema_field(OpenApiTypes.NUMBER)
class SecondsOutField(serializers.Field):  # type: ignore[type-arg]
    """A stored timedelta as a number of seconds."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: timedelta) -> float | int:
        total = value.total_seconds()
        return int(total) if total.is_integer() else total


def _storable_string(text: str, where: str) -> None:
    # PostgreSQL jsonb refuses \u0000, and a lone surrogate cannot be encoded as UTF-8: either
    # would fail inside the INSERT, so refuse them here as bad input.
    if "\x00" in text:
        raise serializers.ValidationError(f"{where} must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError(f"{where} must be valid Unicode text") from None


@extend_schema_field(
    {"description": "Any JSON value, passed to the target; at most PAYLOAD_MAX_BYTES."}
)
class PayloadField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        # Iterative walk: a deeply nested payload must not exhaust the stack here; the services
        # reject depth beyond the limit with a proper message.
        stack: list[tuple[Any, int]] = [(value, 0)]
        while stack:
            item, depth = stack.pop()
            if depth > 64:
                raise serializers.ValidationError("is nested too deeply")
            if isinstance(item, str):
                _storable_string(item, "strings in the payload")
            elif isinstance(item, dict):
                for key, child in item.items():
                    _storable_string(str(key), "keys in the payload")
                    stack.append((child, depth + 1))
            elif isinstance(item, list):
                stack.extend((child, depth + 1) for child in item)
        return value
