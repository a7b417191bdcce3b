from collections.abc import Mapping
from typing import Any

import jsonpath
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.expressions import evaluate, evaluate_parameters, resolve_path

CONTEXT = {
    "workflow": {"workflowId": "wf-1", "input": {"x": 5, "name": "ada", "items": [1, 2], "flag": True}},
    "first": {"output": {"a": {"b": [{"c": "deep"}, 7]}, "n": None}},
}


def test_whole_value_keeps_type() -> None:
    assert evaluate("${workflow.input.x}", CONTEXT) == 5
    assert evaluate("${workflow.input.items}", CONTEXT) == [1, 2]
    assert evaluate("${workflow.input.flag}", CONTEXT) is True
    assert evaluate("${first.output.a.b[0]}", CONTEXT) == {"c": "deep"}
    assert evaluate("${first.output.a.b[1]}", CONTEXT) == 7


def test_workflow_id_and_whole_input() -> None:
    assert evaluate("${workflow.workflowId}", CONTEXT) == "wf-1"
    assert evaluate("${workflow.input}", CONTEXT) == CONTEXT["workflow"]["input"]


def test_interpolation_inside_strings() -> None:
    assert evaluate("hello ${workflow.input.name}, x=${workflow.input.x}", CONTEXT) == "hello ada, x=5"
    assert evaluate("flag=${workflow.input.flag} items=${workflow.input.items}", CONTEXT) == (
        "flag=true items=[1, 2]"
    )


def test_interpolation_writes_what_java_writes() -> None:
    """Conductor interpolates with Objects.toString: null as `null`, maps as {k=v}."""
    context = {"workflow": {"input": {"m": {"a": 1, "b": "x"}, "f": 1.5, "w": 2.0, "n": None}}}
    assert evaluate("m=${workflow.input.m}", context) == "m={a=1, b=x}"
    assert evaluate("f=${workflow.input.f} w=${workflow.input.w}", context) == "f=1.5 w=2.0"
    assert evaluate("n=${workflow.input.n} missing=${workflow.input.zz}", context) == "n=null missing=null"
    assert evaluate("blank=${}", context) == "blank="


def test_nested_expressions_resolve_the_inner_one_first() -> None:
    context = {"workflow": {"input": {"key": "x", "x": 42, "refs": {"x": "y"}, "y": [7]}}}
    assert evaluate("${workflow.input.${workflow.input.key}}", context) == 42
    assert evaluate("v=${workflow.input.${workflow.input.key}}", context) == "v=42"
    assert evaluate("${workflow.input.${workflow.input.refs.${workflow.input.key}}}", context) == [7]
    assert evaluate("${workflow.input.${workflow.input.nope}}", context) is None


def test_missing_path_is_null() -> None:
    assert evaluate("${workflow.input.nope}", CONTEXT) is None
    assert evaluate("${unknownref.output.x}", CONTEXT) is None
    assert evaluate("${first.output.n}", CONTEXT) is None
    assert evaluate("[${workflow.input.nope}]", CONTEXT) == "[null]"


def test_escape_keeps_literal() -> None:
    assert evaluate("$${workflow.input.x}", CONTEXT) == "${workflow.input.x}"
    assert evaluate("cost: $${price} for ${workflow.input.name}", CONTEXT) == "cost: ${price} for ada"


def test_nested_maps_and_lists_and_literals() -> None:
    params = {
        "a": {"inner": "${workflow.input.x}", "lit": 3},
        "b": ["${workflow.input.name}", "plain", 1.5, None],
    }
    assert evaluate_parameters(params, CONTEXT) == {
        "a": {"inner": 5, "lit": 3},
        "b": ["ada", "plain", 1.5, None],
    }


def test_wildcard_returns_list() -> None:
    assert evaluate("${workflow.input.items[*]}", CONTEXT) == [1, 2]


def jsonpath_reading(path: str, context: Mapping[str, Any]) -> Any:
    """What resolve_path answered when every path went through JSONPath (before plain member names
    were read directly)."""
    expression = path if path.startswith("$") else "$." + path
    matches = jsonpath.findall(expression, context)
    return matches[0] if len(matches) == 1 else (list(matches) or None)


NAMES = ["a", "b", "true", "null", "false", "length", "size", "keys", "_x", "A1", "in", "nil"]
VALUES = [None, 0, 1.5, "", "text", True, [], [1, {"a": 2}], {}, {"b": None}]


@settings(max_examples=400, deadline=None)
@given(
    path=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4),
    context=st.recursive(
        st.sampled_from(VALUES),
        lambda inner: st.dictionaries(st.sampled_from(NAMES), inner, max_size=4),
        max_leaves=12,
    ),
)
def test_plain_member_names_read_as_jsonpath_reads_them(path: list[str], context: Any) -> None:
    root = {"ctx": context}
    dotted = ".".join(["ctx", *path])
    assert resolve_path(dotted, root) == jsonpath_reading(dotted, root)
    assert resolve_path("$." + dotted, root) == jsonpath_reading("$." + dotted, root)


def test_paths_jsonpath_still_reads() -> None:
    assert resolve_path("first.output.a.b[1]", CONTEXT) == 7
    assert resolve_path("first.output.a.b[*]", CONTEXT) == [{"c": "deep"}, 7]
    assert resolve_path("first.output.a..c", CONTEXT) == ["deep"]
    assert resolve_path("workflow.input.items.1", CONTEXT) is None  # `.1` is a member name
    assert resolve_path("first.output.[", CONTEXT) is None
    assert resolve_path("first.output.[", CONTEXT) is None  # the cached failure answers alike
