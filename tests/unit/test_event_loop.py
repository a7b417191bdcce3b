"""A service process runs on the loop CAIRN_EVENT_LOOP names: uvloop unless told otherwise."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from services.runtime import run_service
from shared.config import CairnSettings


def _loop_a_service_runs_on(settings: CairnSettings) -> asyncio.AbstractEventLoop:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main(_: CairnSettings, stop: asyncio.Event) -> None:
        seen.append(asyncio.get_running_loop())
        stop.set()

    run_service("loop-probe", main, settings)
    return seen[0]


def test_a_service_runs_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_EVENT_LOOP", raising=False)
    assert isinstance(_loop_a_service_runs_on(CairnSettings()), uvloop.Loop)


def test_the_asyncio_loop_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_EVENT_LOOP", "asyncio")
    loop = _loop_a_service_runs_on(CairnSettings())
    assert not isinstance(loop, uvloop.Loop)
    assert isinstance(loop, asyncio.BaseEventLoop)


def test_an_unknown_loop_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_EVENT_LOOP", "trio")
    with pytest.raises(ValueError, match="event_loop"):
        CairnSettings()
