"""`cairn history export / show`: a code workflow's recorded history, as a file to replay new code
against (cairn.workflow.testing.replay) or as a table for people."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

history_app = typer.Typer(help="Code workflows' histories: export them, read them.", no_args_is_help=True)

Server = Annotated[str | None, typer.Option("--server", help="Cairn api URL (CAIRN_SERVER).")]


def _history(workflow_id: str, server: str | None) -> dict[str, Any]:
    from cairn.cli_common import fail, with_backend

    found = with_backend(server, lambda backend: backend.history(workflow_id))
    if found is None:
        fail(f"no workflow {workflow_id!r}", "list them with `cairn ls`")
    assert found is not None
    return found


@history_app.command("export")
def export(
    workflow_id: Annotated[str, typer.Argument(help="A code workflow's id.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    server: Server = None,
) -> None:
    """The history as JSON: test a change of the code against it with
    `cairn.workflow.testing.replay(workflow, json.load(open(FILE)))` before deploying it."""
    from cairn.cli_common import err

    text = json.dumps(_history(workflow_id, server), indent=2)
    if output is None:
        print(text)
        return
    output.write_text(text + "\n")
    err.print(f"[dim]wrote {output}: test new code with cairn.workflow.testing.replay[/]")


@history_app.command("show")
def show(
    workflow_id: Annotated[str, typer.Argument(help="A code workflow's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    server: Server = None,
) -> None:
    """The history event by event (durabletask's names), and what waits for the next turn."""
    from cairn.cli_common import console, new_table

    history = _history(workflow_id, server)
    if as_json:
        print(json.dumps(history))
        return
    table = new_table("#", "time", "event", "id", "details")
    rows = [(e, "") for e in history["events"]] + [(e, "pending") for e in history["pending"]]
    for index, (event, note) in enumerate(rows):
        when = datetime.fromtimestamp(event.get("timestamp", 0) / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(str(index) if not note else note, when, event["type"], _id(event), _details(event))
    where = f"{history['status']}, generation {history['generation']}"
    console.print(f"[bold]{history['name']}[/] {history['instanceId']} — {where}")
    console.print(table)


def _id(event: dict[str, Any]) -> str:
    for key in ("eventId", "taskScheduledId", "timerId"):
        if event.get(key, -1) != -1:
            return str(event[key])
    return ""


def _details(event: dict[str, Any]) -> str:
    shown = {
        k: v
        for k, v in event.items()
        if k not in ("type", "eventId", "timestamp", "taskScheduledId", "timerId")
    }
    return json.dumps(shown)[:100] if shown else ""
