"""`cairn keys`: make API keys for the api's keys file (CAIRN_AUTH_KEYS_FILE), so nobody has to
invent a secret or compute its SHA-256 by hand. The file gets only the secret's SHA-256; the
secret is printed once, for the client that will use it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from shared.auth.keys import KeysFileError, new_secret, parse_keys, secret_digest
from shared.auth.roles import Role

keys_app = typer.Typer(
    help="Make API keys for the api's keys file (CAIRN_AUTH_KEYS_FILE).", no_args_is_help=True
)
err = Console(stderr=True)


def _existing(path: Path) -> list[Any]:
    if not path.exists():
        return []
    try:
        entries = json.loads(path.read_text())
        parse_keys(entries)
    except (json.JSONDecodeError, KeysFileError) as error:
        err.print(f"[bold red]error:[/] {path} is not a keys file Cairn can use: {error}")
        raise typer.Exit(2) from None
    assert isinstance(entries, list)
    return entries


def _write(path: Path, entries: list[Any]) -> None:
    """In place, not by rename: Docker bind-mounts a single file by inode, so a running api
    sees an in-place rewrite (and reloads its keys) but not a replaced file. A new file is
    readable by its owner only."""
    text = json.dumps(entries, indent=2) + "\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


@keys_app.command("add")
def add(
    file: Annotated[Path, typer.Argument(help="The keys file; created (mode 0600) if missing.")],
    key_id: Annotated[str, typer.Option("--id", help="Key id: who or what uses it (ci, billing-workers).")],
    role: Annotated[Role, typer.Option(help="admin, operator, worker or reader.")],
    task_type: Annotated[
        list[str] | None, typer.Option("--task-type", help="worker: a task type it may work on (repeat).")
    ] = None,
) -> None:
    """Add a key with a new random secret; print the secret (only now) and how to use it."""
    entries = _existing(file)
    secret = new_secret()
    entry: dict[str, Any] = {
        "keyId": key_id,
        "keySecretSha256": secret_digest(secret).hex(),
        "role": role.value,
    }
    if task_type:
        entry["taskTypes"] = task_type
    try:
        parse_keys([*entries, entry])
    except KeysFileError as error:
        err.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(2) from None
    _write(file, [*entries, entry])
    err.print(f"added key [bold]{key_id}[/] (role {role.value}) to {file}; its secret, shown only now:")
    print(secret)
    err.print(
        f"[dim]clients: CAIRN_API_KEY_ID={key_id} CAIRN_API_KEY_SECRET=<the secret>; conductor clients: "
        "AuthenticationSettings(key_id, key_secret). A running api picks the change up at once.[/]"
    )
