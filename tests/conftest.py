"""Shared fixtures: real servers from the environment (deploy/local/up.sh prints the variables).

Outside CI a test that needs a server skips when none is configured; with CI=true it fails, so
a broken install can never pass as a green run.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shared.topics import Topics
from tests.ai.fixtures import llm, mcp  # noqa: F401 - fixtures for every test module
from tests.needs import unavailable


def _require(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if value:
        return value
    unavailable(f'{what} needed: set {variable} (eval "$(bash deploy/local/up.sh)")')


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    bootstrap = _require("CAIRN_KAFKA_BOOTSTRAP", "Kafka")
    if not _reachable(bootstrap.split(",")[0]):
        pytest.fail(f"Kafka at {bootstrap} is not reachable")
    return bootstrap


@pytest.fixture(scope="session")
def mongo_url() -> str:
    url = _require("CAIRN_MONGO_URL", "A MongoDB-protocol server")
    hostport = url.split("://", 1)[1].split("/", 1)[0].split("@")[-1]
    if not _reachable(hostport):
        pytest.fail(f"MongoDB server at {url} is not reachable")
    return url


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def topics(unique: str) -> Topics:
    return Topics(prefix=f"t{unique}.")


async def _mongo_store(mongo_url: str, unique: str) -> AsyncIterator[object]:
    from shared.adapters.mongo_store import MongoStore

    store = MongoStore(mongo_url, f"cairn_test_{unique}")
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def mongo_store(mongo_url: str, unique: str) -> AsyncIterator[object]:
    async for store in _mongo_store(mongo_url, unique):
        yield store


@pytest.fixture
async def mongo_fresh_store(mongo_url: str, unique: str) -> AsyncIterator[object]:
    """A second adapter on the same database, as another process would see it."""
    async for store in _mongo_store(mongo_url, unique):
        yield store


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    """The SQLite file a test's adapters share; it needs no server."""
    return str(tmp_path / "cairn.db")


async def _sqlite_store(path: str) -> AsyncIterator[object]:
    from shared.adapters.sqlite_store import SqliteStore

    store = SqliteStore(path)
    await store.open()
    yield store
    await store.close()


@pytest.fixture
async def sqlite_store(sqlite_path: str) -> AsyncIterator[object]:
    async for store in _sqlite_store(sqlite_path):
        yield store


@pytest.fixture
async def sqlite_fresh_store(sqlite_path: str) -> AsyncIterator[object]:
    """A second adapter (its own connection and caches) on the same file, as another process
    would see it."""
    async for store in _sqlite_store(sqlite_path):
        yield store


STORE_ADAPTERS = [pytest.param("mongo", marks=pytest.mark.integration), "sqlite"]


@pytest.fixture(params=STORE_ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    """Which store adapter a test runs on; tests asking for `store` run once per adapter."""
    return str(request.param)


@pytest.fixture
def store(adapter: str, request: pytest.FixtureRequest) -> object:
    """The store adapter under test (its fixture is `<adapter>_store` above)."""
    return request.getfixturevalue(f"{adapter}_store")


@pytest.fixture
def fresh_store(adapter: str, request: pytest.FixtureRequest) -> object:
    """A second adapter of the same kind on the same database, as another process would see it."""
    return request.getfixturevalue(f"{adapter}_fresh_store")
