"""CAIRN_SQLITE_SYNCHRONOUS reaches every connection `cairn dev` opens (store and bus, the
inline one and the threaded one), NORMAL stays the default, and a level that could corrupt the
file on a power cut is refused with the setting's name."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common import embedded_bus, sqlite_store
from shared.adapters.sqlite_durability import open_wal, synchronous_of
from shared.config import CairnSettings, settings_problems


async def _levels(lane: object) -> set[str]:
    """The synchronous level of both of a lane's connections."""
    run = lane.run  # type: ignore[attr-defined]
    return {await run(synchronous_of, inline=True), await run(synchronous_of)}


@pytest.mark.parametrize(("variable", "expected"), [(None, "NORMAL"), ("FULL", "FULL"), ("EXTRA", "EXTRA")])
async def test_the_setting_reaches_every_connection_of_store_and_bus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str | None, expected: str
) -> None:
    if variable is None:
        monkeypatch.delenv("CAIRN_SQLITE_SYNCHRONOUS", raising=False)
    else:
        monkeypatch.setenv("CAIRN_SQLITE_SYNCHRONOUS", variable)
    settings = CairnSettings()
    path = str(tmp_path / "cairn-dev.db")
    store = await sqlite_store(path, settings)
    bus = embedded_bus(path, settings)
    try:
        assert await _levels(store._lane) == {expected}  # type: ignore[attr-defined]
        database = bus.db  # type: ignore[attr-defined]
        assert {await database.run_inline(synchronous_of), await database.run(synchronous_of)} == {expected}
    finally:
        await bus.db.close()  # type: ignore[attr-defined]
        await store.close()


def test_off_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_SQLITE_SYNCHRONOUS", "OFF")
    with pytest.raises(ValidationError) as caught:
        CairnSettings()
    assert any("sqlite_synchronous" in problem.lower() for problem in settings_problems(caught.value))


def test_open_wal_refuses_an_unknown_level(tmp_path: Path) -> None:
    path = str(tmp_path / "x.db")
    with pytest.raises(ValueError, match="NORMAL, FULL, EXTRA"):
        open_wal(path, check_same_thread=True, busy_timeout_ms=10, synchronous="OFF")  # type: ignore[arg-type]
    connection = open_wal(path, check_same_thread=True, busy_timeout_ms=10, synchronous="FULL")
    assert isinstance(connection, sqlite3.Connection) and synchronous_of(connection) == "FULL"
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
