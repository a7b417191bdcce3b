"""What the `cairn` commands share: consoles, options, errors, tables and the backend call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from cairn.backends import Backend, BackendError, backend_for
from shared.config import CairnSettings

console = Console()
err = Console(stderr=True)
T = TypeVar("T")

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
InsecureOption = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="Let the api listen on a non-loopback address without CAIRN_AUTH_KEYS_FILE, open to anyone "
        "(CAIRN_INSECURE).",
    ),
]
ServerOption = Annotated[
    str | None,
    typer.Option("--server", help="Cairn api URL (CAIRN_SERVER); default: cairn dev at 127.0.0.1:8080."),
]


def run_async(coro_fn: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(coro_fn())  # type: ignore[arg-type]


def fail(message: str, hint: str | None = None) -> None:
    err.print(f"[bold red]error:[/] {message}")
    if hint:
        err.print(f"[dim]{hint}[/]")
    raise typer.Exit(2)


def json_arg(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        fail(f"{what} is not valid JSON: {error}", f'example: {what} \'{{"key": "value"}}\'')
    if not isinstance(value, dict):
        fail(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


class Rows:
    """A table for people: every row on one line. Columns keep the width of their content (up to
    40 cells) and the last column, the free-text one, gives way with an ellipsis on narrow
    terminals."""

    def __init__(self, *headers: str) -> None:
        self.headers = headers
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def __rich__(self) -> Table:
        from rich.text import Text

        widths = [
            max([len(header), *(Text.from_markup(row[index]).cell_len for row in self.rows)])
            for index, header in enumerate(self.headers)
        ]
        fixed = [min(width, 40) for width in widths[:-1]]
        budget = console.width - 3 * len(self.headers) - 1  # borders and padding
        floors = [max(len(header), 4) for header in self.headers[:-1]]
        while sum(fixed) + 12 > budget and any(w > f for w, f in zip(fixed, floors, strict=True)):
            widest = max(range(len(fixed)), key=lambda i: fixed[i] - floors[i])
            fixed[widest] -= 1  # narrow terminal: the widest column gives way first
        room = budget - sum(fixed)
        table = Table()
        for header, width in zip(self.headers, [*fixed, max(min(widths[-1], room), 12)], strict=True):
            table.add_column(header, no_wrap=True, overflow="ellipsis", width=width)
        for row in self.rows:
            table.add_row(*row)
        return table


def new_table(*headers: str) -> Rows:
    return Rows(*headers)


def when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


def with_backend(server: str | None, action: Callable[[Backend], Awaitable[T]]) -> T:
    """Run `action` on the chosen backend; refusals become a clean error with a hint."""
    settings = CairnSettings()
    if server:
        settings = settings.model_copy(update={"server": server})

    async def call() -> T:
        async with backend_for(settings) as backend:
            return await action(backend)

    try:
        return run_async(call)
    except BackendError as error:
        fail(str(error), error.hint)
        raise  # unreachable: fail exits


STATUS_STYLE = {
    "COMPLETED": "green",
    "RUNNING": "cyan",
    "SCHEDULED": "cyan",
    "IN_PROGRESS": "yellow",
    "FAILED": "red",
    "FAILED_WITH_TERMINAL_ERROR": "red",
    "TIMED_OUT": "red",
    "TERMINATED": "magenta",
    "CANCELED": "magenta",
}


def styled(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"
