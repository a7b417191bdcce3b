from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path)
    await cluster.start()
    yield cluster
    codes = await cluster.stop()
    unclean = {name: code for name, code in codes.items() if code not in (0, None)}
    assert not unclean, f"services did not stop cleanly on SIGTERM: {unclean}\n{cluster.diagnostics()}"
