from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, assert_stopped_cleanly


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path)
    await cluster.start()
    yield cluster
    assert_stopped_cleanly(await cluster.stop(), cluster.diagnostics)
