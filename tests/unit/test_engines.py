"""The definition-kind seam: the decider asks for the engine of a document's kind."""

import pytest

from shared.core import decide
from shared.core.engines import GRAPH, UnknownDefinitionKindError, engine_for
from shared.core.run import Limits
from shared.core.validation import parse_workflow_def
from shared.models.documents import WorkflowDocument
from tests.unit.factories import NOW, result, start, three_step_def


def test_a_document_is_a_graph_workflow_unless_it_says_otherwise() -> None:
    assert (
        WorkflowDocument.model_validate({"workflowId": "w", "state": start(three_step_def()).state}).kind
        == GRAPH
    )


def test_the_graph_engine_decides_as_decide_does() -> None:
    definition = three_step_def()
    begun = start(definition, {"n": 1})
    event = result(begun.state, "a", output_data={"n": 2})
    engine = engine_for(GRAPH)
    via_engine = engine.decide(
        definition, begun.state, [event], NOW, limits=Limits(), task_defs={}, sandbox=None
    )
    direct = decide(definition, begun.state, [event], NOW)
    assert via_engine.state == direct.state and via_engine.outbox == direct.outbox


def test_only_definitions_with_scripts_may_block() -> None:
    engine = engine_for(GRAPH)
    scripted = parse_workflow_def(
        {
            "name": "s",
            "tasks": [
                {
                    "name": "i",
                    "taskReferenceName": "i",
                    "type": "INLINE",
                    "inputParameters": {"expression": "1"},
                }
            ],
        }
    )
    assert engine.may_block(scripted) and not engine.may_block(three_step_def())


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(UnknownDefinitionKindError, match=r"'replay'.*known: code, graph"):
        engine_for("replay")
