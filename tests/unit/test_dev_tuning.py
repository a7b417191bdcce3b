"""`cairn dev` on its embedded bus holds the api's started reports back for the task's result,
with two members per polled type (services/dev.py); a value the environment sets wins, and on
Kafka the services' own defaults stay."""

from pathlib import Path

import pytest

from services.dev import DevPlan, tuned_for_the_embedded_bus
from shared.config import CairnSettings

EMBEDDED = DevPlan(db_path=Path("cairn-dev.db"))


def test_the_embedded_bus_gets_the_tuning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_API_DISPATCH_CONSUMERS", raising=False)
    monkeypatch.delenv("CAIRN_API_STARTED_REPORT_DELAY_S", raising=False)
    plain = CairnSettings()
    assert (plain.api_dispatch_consumers, plain.api_started_report_delay_s) == (1, 0.0)
    tuned = tuned_for_the_embedded_bus(EMBEDDED, plain)
    assert (tuned.api_dispatch_consumers, tuned.api_started_report_delay_s) == (2, 0.1)


def test_a_value_the_environment_sets_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_API_STARTED_REPORT_DELAY_S", "0")
    monkeypatch.delenv("CAIRN_API_DISPATCH_CONSUMERS", raising=False)
    tuned = tuned_for_the_embedded_bus(EMBEDDED, CairnSettings())
    assert (tuned.api_dispatch_consumers, tuned.api_started_report_delay_s) == (2, 0.0)


def test_on_kafka_the_services_defaults_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_API_DISPATCH_CONSUMERS", raising=False)
    monkeypatch.delenv("CAIRN_API_STARTED_REPORT_DELAY_S", raising=False)
    on_kafka = DevPlan(db_path=Path("cairn-dev.db"), kafka="127.0.0.1:9092")
    tuned = tuned_for_the_embedded_bus(on_kafka, CairnSettings())
    assert (tuned.api_dispatch_consumers, tuned.api_started_report_delay_s) == (1, 0.0)
