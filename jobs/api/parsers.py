"""JSON body parsing that turns every unparsable body into a 400, never a 500."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """DRF's parser (which already refuses NaN and Infinity) plus two more refusals.

    json.loads raises RecursionError, not ValueError, on very deep nesting, which DRF would let
    through as a 500; and every body of this API is a JSON object, so anything else is refused.
    """

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ParseError("expected a JSON object")
        return data
