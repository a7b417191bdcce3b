"""docs/configuration.md is generated from CairnSettings and the code's environment reads, and
the committed page is the current one."""

from pathlib import Path

from shared.config import CairnSettings
from shared.config_doc import environment_reads, render, variable

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_page_is_current() -> None:
    assert DOC.exists(), "run `python -m shared.config_doc > docs/configuration.md`"
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: run `python -m shared.config_doc > docs/configuration.md`"
    )


def test_every_setting_and_environment_read_is_on_the_page() -> None:
    text = DOC.read_text()
    for name in CairnSettings.model_fields:
        assert f"| `{variable(name)}` |" in text, name
    reads = environment_reads()
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in reads  # the scan finds reads at all
    for name in reads:
        assert f"| `{name}` |" in text, name
