"""`cairn deadletter ls / show / replay`: what the consumers gave up on, and sending it again."""

from __future__ import annotations

import json
from typing import Annotated

import typer

deadletter_app = typer.Typer(
    help="Messages Cairn could not handle: look at them and resend them.", no_args_is_help=True
)


@deadletter_app.command("ls")
def ls(
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    server: Annotated[str | None, typer.Option("--server", help="Cairn api URL (CAIRN_SERVER).")] = None,
) -> None:
    """List the newest dead letters: where each came from and why it was given up on."""
    from cairn.cli_common import console, err, new_table, with_backend

    letters = with_backend(server, lambda backend: backend.dead_letters(limit))
    if as_json:
        print(json.dumps(letters))
        return
    table = new_table("id", "from", "key", "reason")
    for letter in letters:
        source = f"{letter['sourceTopic']}[{letter['sourcePartition']}]@{letter['sourceOffset']}"
        table.add_row(letter["id"], source, str(letter["key"] or ""), (letter["reason"] or "")[:90])
    console.print(table)
    if letters:
        err.print("[dim]next: cairn deadletter show ID, cairn deadletter replay ID[/]")
    else:
        err.print("[dim]no dead letters[/]")


@deadletter_app.command("show")
def show(
    letter_id: Annotated[str, typer.Argument(help="A dead letter's id (partition:offset), from `ls`.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    server: Annotated[str | None, typer.Option("--server", help="Cairn api URL (CAIRN_SERVER).")] = None,
) -> None:
    """One dead letter whole: the reason, the original message and its headers."""
    from cairn.cli_common import console, fail, with_backend

    letter = with_backend(server, lambda backend: backend.dead_letter(letter_id))
    if letter is None:
        fail(f"no dead letter {letter_id!r}", "list them with `cairn deadletter ls`")
        return
    if as_json:
        print(json.dumps(letter))
        return
    console.print(f"[bold]dead letter {letter['id']}[/]")
    where = f"partition {letter['sourcePartition']} offset {letter['sourceOffset']}"
    console.print(f"from    {letter['sourceTopic']} {where}")
    console.print(f"key     {letter['key']}")
    console.print(f"reason  {letter['reason']}", soft_wrap=True)
    console.print("message", soft_wrap=True)
    console.print(letter["valueText"], markup=False, soft_wrap=True)


@deadletter_app.command("replay")
def replay(
    letter_id: Annotated[str, typer.Argument(help="A dead letter's id (partition:offset), from `ls`.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    server: Annotated[str | None, typer.Option("--server", help="Cairn api URL (CAIRN_SERVER).")] = None,
) -> None:
    """Publish the original message again to the topic it came from (after fixing its cause)."""
    from cairn.cli_common import console, with_backend

    replayed = with_backend(server, lambda backend: backend.replay(letter_id))
    if as_json:
        print(json.dumps(replayed))
        return
    console.print(f"replayed {replayed['id']} to {replayed['replayedTo']} (key {replayed['key']})")
