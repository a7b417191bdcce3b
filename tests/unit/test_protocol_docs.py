"""docs/protocol.md and docs/schemas/ stay true to the code."""

import json
import re
from pathlib import Path

from shared.models.history import TurnResponse, WorkItem
from shared.models.messages import DECIDER_INBOUND, OUTBOX_MESSAGE
from shared.protocol import channels, schema_files

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_generated_schemas_are_committed_and_current() -> None:
    for name, text in schema_files().items():
        path = DOCS / "schemas" / name
        assert path.exists(), f"run `python -m shared.protocol` to write {path}"
        assert path.read_text() == text, f"{path} is stale: run `python -m shared.protocol`"


def test_every_topic_is_in_the_protocol_table() -> None:
    text = (DOCS / "protocol.md").read_text()
    for channel in channels():
        assert f"| `{channel.topic}` | {channel.key} |" in text, channel.topic


def test_every_example_parses_as_the_message_it_shows() -> None:
    text = (DOCS / "protocol.md").read_text()
    examples = re.findall(r"```json\n(.*?)```", text, re.S)
    assert len(examples) >= 9
    for example in examples:
        data = json.loads(example)
        inbound = {
            "start_workflow",
            "task_result",
            "signal",
            "terminate",
            "timer_fired",
            "decide_request",
            "subworkflow_ended",
            "pause",
            "resume",
            "restart",
            "rerun",
            "retry",
            "skip_task",
            "subworkflow_reopened",
            "raise_event",
        }
        if "type" not in data:  # a code workflow's work item or turn answer (a task's input or output)
            (TurnResponse if "actions" in data else WorkItem).model_validate(data)
        elif data["type"] in inbound:
            DECIDER_INBOUND.validate_python(data)
        else:
            OUTBOX_MESSAGE.validate_python(data)
