from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.authkeys import auth_settings
from tests.devserver import DevServer


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A `cairn dev` process on its own state file (embedded store and bus), shared by a module."""
    server = DevServer(tmp_path_factory.mktemp("dev"))
    server.start()
    yield server
    code = server.process.stop()
    assert code == 0, f"cairn dev did not stop cleanly on SIGTERM ({code}):\n{server.process.log_tail()}"


@pytest.fixture(scope="module")
def auth_dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A `cairn dev` with API keys (tests/authkeys.py): every request but /health needs a token."""
    directory = tmp_path_factory.mktemp("dev-auth")
    server = DevServer(directory, None, **auth_settings(directory))
    server.start()
    yield server
    code = server.process.stop()
    assert code == 0, f"cairn dev did not stop cleanly on SIGTERM ({code}):\n{server.process.log_tail()}"


@pytest.fixture(scope="module")
def cairn_server_url(dev_server: DevServer) -> str:
    return dev_server.url


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path
