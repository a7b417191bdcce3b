"""The system worker's secret store (shared/secrets.py): its three sources, resolution only at the
marked places, masking in results and in log records."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from shared.secrets import RedactingFilter, SecretError, SecretStore


def test_sources_later_wins_env_over_dir_over_file(tmp_path: Path) -> None:
    file = tmp_path / "secrets.json"
    file.write_text(json.dumps({"A": "from-file", "B": "from-file"}))
    directory = tmp_path / "mounted"
    directory.mkdir()
    (directory / "B").write_text("from-dir\n")
    (directory / "C").write_text("no-newline")
    (directory / "..data").mkdir()  # what a mounted Kubernetes Secret also holds
    (directory / ".hidden").write_text("x")
    store = SecretStore.from_sources(str(file), str(directory), {"CAIRN_SECRET_C": "from-env", "OTHER": "x"})
    assert store.values == {"A": "from-file", "B": "from-dir", "C": "from-env"}


@pytest.mark.parametrize(
    ("content", "says"),
    [("not json", "cannot be read as JSON"), ('["a"]', "must be a JSON object of name -> text")],
)
def test_a_bad_secrets_file_is_named(tmp_path: Path, content: str, says: str) -> None:
    file = tmp_path / "s.json"
    file.write_text(content)
    with pytest.raises(SecretError, match=says):
        SecretStore.from_sources(str(file), None, {})


def test_references_are_resolved_only_at_the_marked_places_and_the_input_is_left_alone() -> None:
    store = SecretStore({"T": "tok-1234", "U": "usr-5678"})
    data = {
        "headers": {"Authorization": "Bearer ${secrets.T}", "X-User": "${workflow.secrets.U}"},
        "body": "${secrets.T}",
        "list": ["${secrets.T}"],
    }
    resolved, used = store.resolve(data, [["headers", "Authorization"], ["headers", "X-User"], ["list", 0]])
    assert resolved == {
        "headers": {"Authorization": "Bearer tok-1234", "X-User": "usr-5678"},
        "body": "${secrets.T}",
        "list": ["tok-1234"],
    }
    assert used == {"T", "U"}
    assert data["headers"]["Authorization"] == "Bearer ${secrets.T}", "the task's input is not changed"
    assert store.resolve(data, [["nowhere", "x"], ["body", 3]])[0] == data


def test_an_unknown_secret_names_where_to_put_it() -> None:
    with pytest.raises(
        SecretError, match=r"secret 'NOPE' is not in the secret store \(set CAIRN_SECRET_NOPE"
    ):
        SecretStore({}).resolve({"h": "${secrets.NOPE}"}, [["h"]])


def test_the_redactor_masks_values_in_data_and_text_longest_first() -> None:
    store = SecretStore({"SHORT": "abc", "T": "tok-1234", "LONG": "tok-1234-extended"})
    redactor = store.redactor(["SHORT", "T", "LONG"])
    assert redactor.data({"echo": "Bearer tok-1234-extended", "n": 1, "k": ["tok-1234"]}) == {
        "echo": "Bearer ***",
        "n": 1,
        "k": ["***"],
    }
    assert redactor.text("abc stays: too short to mask safely") == "abc stays: too short to mask safely"


def test_the_logging_filter_masks_messages_arguments_and_tracebacks() -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(RedactingFilter(SecretStore({"T": "tok-1234"}).all_values_redactor()))
    log = logging.getLogger("test-redaction")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("calling %s", "http://h/?key=tok-1234")
        try:
            raise RuntimeError("refused tok-1234")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    assert records[0] == "calling http://h/?key=***"
    assert "tok-1234" not in "\n".join(records) and "refused ***" in records[1]
