"""What both searches (`GET /api/workflow/search`, `GET /api/tasks/search`) check first: the page
size, the query and the sort, refused with a 400 naming the parameter."""

from __future__ import annotations

from services.api.context import ApiError
from shared.search import FIELDS, MAX_SIZE, FieldKind, Query, QueryError, parse_query, parse_sort


def parsed_search(
    query: str | None, sort: str | None, size: int, what: str, fields: dict[str, FieldKind] = FIELDS
) -> tuple[Query | None, tuple[tuple[str, bool], ...]]:
    """(query, order) parsed over `fields`, or the 400 Conductor's clients expect."""
    if size > MAX_SIZE:
        raise ApiError(
            400, f"size: cannot return more than {MAX_SIZE} {what}; page with start", [("size", "too large")]
        )
    try:
        return parse_query(query, fields), parse_sort(sort, fields)
    except QueryError as error:
        where = "sort" if str(error).startswith("sort") else "query"
        raise ApiError(400, str(error), [(where, str(error))]) from None
