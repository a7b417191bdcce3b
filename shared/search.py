"""Conductor's workflow search: the query language, the sort, and the request both stores answer.

`GET /api/workflow/search?query=...&freeText=...&sort=...&start=&size=` takes Conductor's query
language as its Elasticsearch index reads it (docs/research/conductor-lifecycle.md, Search):

    workflowType IN (order, refund) AND status IN (RUNNING, PAUSED) AND startTime > 1700000000000
    correlationId = "cart-7" OR (workflowId = 'a' AND version >= 2)

- comparisons `=`, `!=`, `>`, `<`, `>=`, `<=`; `IN (a, b)`; `IS NULL`, `IS NOT NULL`;
  `BETWEEN x AND y`; `STARTS_WITH "prefix"`; `AND`, `OR` and parentheses, AND binding tighter
  (Conductor's Elasticsearch parser has no precedence; its SQLite one only AND);
- values quoted with `"` or `'`, or bare (`status = RUNNING` is taken too); times are epoch
  milliseconds or ISO 8601; keywords in any case;
- the fields: workflowType, workflowId, correlationId, status, startTime, endTime, updateTime,
  version, parentWorkflowId, idempotencyKey. Anything else is a QueryError naming the token and
  its column (a 400), never silently ignored.

`freeText` other than `*` matches workflows whose document contains the text (case-insensitive):
ids, input, output, task outputs. `sort` is `field[:ASC|DESC]`, several joined by `|` or `,`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from shared.models.runtime import TaskStatus, WorkflowState, WorkflowStatus

FieldKind = Literal["text", "status", "task_status", "time", "int"]
FIELDS: dict[str, FieldKind] = {
    "workflowType": "text",
    "workflowId": "text",
    "correlationId": "text",
    "status": "status",
    "startTime": "time",
    "endTime": "time",
    "updateTime": "time",
    "version": "int",
    "parentWorkflowId": "text",
    "idempotencyKey": "text",
}
TASK_FIELDS: dict[str, FieldKind] = {
    "taskId": "text",
    "taskType": "text",
    "taskDefName": "text",
    "referenceTaskName": "text",
    "status": "task_status",
    "workflowId": "text",
    "workflowType": "text",
    "scheduledTime": "time",
    "startTime": "time",
    "updateTime": "time",
    "endTime": "time",
}
"""What `GET /api/tasks/search` filters and sorts task executions by."""
Op = Literal["=", "!=", ">", "<", ">=", "<=", "IN", "IS NULL", "IS NOT NULL", "BETWEEN", "STARTS_WITH"]
MAX_SIZE = 5000
"""Conductor's bound on one page of search results."""


class QueryError(ValueError):
    """A query, sort or free text Cairn cannot answer; the message names the token and where."""


@dataclass(frozen=True)
class Condition:
    field: str
    op: Op
    values: tuple[Any, ...] = ()


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Query, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Query, ...]


Query = Condition | AllOf | AnyOf


@dataclass(frozen=True)
class SearchRequest:
    """What both stores answer: the matching executions' exact count, and one page of them."""

    query: Query | None = None
    free_text: str | None = None
    sort: tuple[tuple[str, bool], ...] = (("startTime", True),)
    """(field, descending); newest first when the request names no sort."""
    start: int = 0
    size: int = 100
    extra: dict[str, Any] = field(default_factory=dict)


GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: _atom (_AND _atom)*
_atom: "(" or_expr ")" | condition
?condition: FIELD COMPARE value                       -> compare
          | FIELD _IN "(" [value ("," value)*] ")"    -> in_list
          | FIELD _IS _NOT _NULL                      -> is_not_null
          | FIELD _IS _NULL                           -> is_null
          | FIELD _BETWEEN value _AND value           -> between
          | FIELD _STARTS_WITH value                  -> starts_with
value: STRING | NUMBER | BARE
COMPARE: "!=" | ">=" | "<=" | "=" | ">" | "<"
_AND.2: /and\b/i
_OR.2: /or\b/i
_IN.2: /in\b/i
_IS.2: /is\b/i
_NOT.2: /not\b/i
_NULL.2: /null\b/i
_BETWEEN.2: /between\b/i
_STARTS_WITH.2: /starts_with\b/i
FIELD: /[A-Za-z_][A-Za-z0-9_]*/
STRING: /"(?:[^"\\]|\\.)*"/ | /'(?:[^'\\]|\\.)*'/
NUMBER.1: /-?\d+(\.\d+)?([eE][-+]?\d+)?(?![^\s(),])/
BARE: /[^\s(),'"=<>!]+/
%import common.WS
%ignore WS
"""
_PARSER = Lark(GRAMMAR, parser="lalr", propagate_positions=False, maybe_placeholders=False)


@dataclass(frozen=True)
class _Literal:
    """A value as written: its text (unquoted), and whether it was quoted. What it means depends
    on the field (shared by `_value`): `00123` is text for a correlation id, a number for a time."""

    text: str
    quoted: bool


def _literal(token: Token) -> _Literal:
    text = str(token)
    if token.type == "STRING":
        body = text[1:-1]
        if "\\" in body:
            body = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
        return _Literal(body, True)
    return _Literal(text, False)


def _value(field_name: str, raw: _Literal, fields: dict[str, FieldKind]) -> Any:
    """A value as the field holds it: a status checked, a time in epoch ms, a version an int,
    text as written."""
    kind = fields[field_name]
    if kind == "task_status":
        try:
            return TaskStatus(raw.text.upper()).value
        except ValueError:
            allowed = ", ".join(s.value for s in TaskStatus)
            raise QueryError(f"query: {raw.text!r} is not a task status ({allowed})") from None
    if kind == "status":
        try:
            return WorkflowStatus(raw.text.upper()).value
        except ValueError:
            allowed = ", ".join(s.value for s in WorkflowStatus)
            raise QueryError(f"query: {raw.text!r} is not a workflow status ({allowed})") from None
    if kind == "time":
        if not raw.quoted and re.fullmatch(r"-?\d+", raw.text):
            return int(raw.text)
        try:
            moment = datetime.fromisoformat(raw.text.replace("Z", "+00:00"))
        except ValueError:
            raise QueryError(
                f"query: {field_name} takes epoch milliseconds or an ISO 8601 time, not {raw.text!r}"
            ) from None
        if moment.tzinfo is None:  # a time without a zone is UTC, whatever the server's zone
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    if kind == "int":
        if re.fullmatch(r"-?\d+", raw.text):
            return int(raw.text)
        raise QueryError(f"query: {field_name} takes a whole number, not {raw.text!r}")
    return raw.text


@v_args(inline=True)
class _Build(Transformer[Token, Query]):
    def __init__(self, fields: dict[str, FieldKind]) -> None:
        super().__init__()
        self.fields = fields

    def _field(self, token: Token) -> str:
        name = str(token)
        if name not in self.fields:
            raise QueryError(
                f"query: unknown field {name!r} at column {token.column}; search by {', '.join(self.fields)}"
            )
        return name

    def value(self, token: Token) -> _Literal:
        return _literal(token)

    def compare(self, name: Token, op: Token, value: Any) -> Condition:
        field_name = self._field(name)
        if self.fields[field_name] in ("text", "status", "task_status") and str(op) in (">", "<", ">=", "<="):
            raise QueryError(f"query: {field_name} cannot be compared with {op} (only = != IN STARTS_WITH)")
        return Condition(field_name, str(op), (_value(field_name, value, self.fields),))  # type: ignore[arg-type]

    def in_list(self, name: Token, *values: Any) -> Condition:
        field_name = self._field(name)
        return Condition(field_name, "IN", tuple(_value(field_name, v, self.fields) for v in values))

    def is_null(self, name: Token) -> Condition:
        return Condition(self._field(name), "IS NULL")

    def is_not_null(self, name: Token) -> Condition:
        return Condition(self._field(name), "IS NOT NULL")

    def between(self, name: Token, low: Any, high: Any) -> Condition:
        field_name = self._field(name)
        return Condition(
            field_name,
            "BETWEEN",
            (_value(field_name, low, self.fields), _value(field_name, high, self.fields)),
        )

    def starts_with(self, name: Token, prefix: _Literal) -> Condition:
        field_name = self._field(name)
        if self.fields[field_name] != "text":
            raise QueryError(f"query: STARTS_WITH takes a text field, not {field_name}")
        return Condition(field_name, "STARTS_WITH", (prefix.text,))

    def and_expr(self, *parts: Query) -> AllOf:
        return AllOf(parts)

    def or_expr(self, *parts: Query) -> AnyOf:
        return AnyOf(parts)


def searched_fields(state: WorkflowState) -> tuple[object, ...]:
    """What a search row holds of a state: a commit that changes none of it leaves the row."""
    return (
        state.workflow_name,
        state.status,
        state.correlation_id,
        state.start_time,
        state.create_time,
        state.end_time,
        state.workflow_version,
        state.parent_workflow_id,
        state.idempotency_key,
    )


def parse_query(text: str | None, fields: dict[str, FieldKind] = FIELDS) -> Query | None:
    if text is None or not text.strip():
        return None
    try:
        tree = _PARSER.parse(text)
        return _Build(fields).transform(tree)
    except UnexpectedInput as error:
        raise QueryError(_syntax_message(text, error)) from None
    except LarkError as error:  # a QueryError raised inside the transformer arrives wrapped
        cause = error.__context__
        if isinstance(cause, QueryError):
            raise cause from None
        raise QueryError(f"query: {error}") from None


def _syntax_message(text: str, error: UnexpectedInput) -> str:
    column = getattr(error, "column", None) or len(text) + 1
    if isinstance(error, UnexpectedEOF) or (
        isinstance(error, UnexpectedToken) and error.token.type == "$END"
    ):
        return f"query: ends too early at column {len(text) + 1} (a condition or ')' is missing)"
    if isinstance(error, UnexpectedToken):
        return f"query: unexpected {str(error.token)!r} at column {column}"
    if isinstance(error, UnexpectedCharacters) and error.pos_in_stream is not None:
        return f"query: unexpected {text[error.pos_in_stream]!r} at column {column}"
    return f"query: cannot read it at column {column}"


def parse_sort(text: str | None, fields: dict[str, FieldKind] = FIELDS) -> tuple[tuple[str, bool], ...]:
    """Conductor's `sort`: `field[:ASC|DESC]`, several joined by `|` (Conductor) or `,`."""
    if text is None or not text.strip():
        return (("startTime", True),)
    found: list[tuple[str, bool]] = []
    for item in text.replace(",", "|").split("|"):
        name, _, order = item.strip().partition(":")
        if name not in fields:
            raise QueryError(f"sort: unknown field {name!r}; sort by {', '.join(fields)}")
        if order.upper() not in ("", "ASC", "DESC"):
            raise QueryError(f"sort: {order!r} is not ASC or DESC (in {item.strip()!r})")
        found.append((name, order.upper() == "DESC"))
    return tuple(found)


def free_text_of(text: str | None) -> str | None:
    """None for no free-text condition (`*`, empty)."""
    if text is None or text.strip() in ("", "*"):
        return None
    return text.strip()
