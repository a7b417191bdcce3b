"""DO_WHILE: body first, condition after each iteration, `ref__N` executions, the loop's output,
list mode, keepLastN, nested loops (`ref__2__3`), and Cairn keeping only the current iteration in
the document (docs/research/conductor-operators.md, DO_WHILE; shared/core/tasktypes/do_while.py)."""

from __future__ import annotations

from typing import Any

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, do_while, fork, inline, join, simple, switch, task, workflow


def two_step_loop(**after_inputs: Any) -> Flow:
    loop = do_while(
        "loop",
        "$.loop['iteration'] < 3",
        simple("b1", inputParameters={"i": "${loop.output.iteration}"}),
        simple("b2", inputParameters={"prev": "${b1.output.v}"}),
    )
    return Flow(workflow(loop, simple("after", inputParameters=after_inputs)))


def run_body(f: Flow) -> list[tuple[str, dict[str, Any]]]:
    """Complete body tasks with v = 1, 2, 3, ... until `after` is due; what each one got."""
    seen = []
    v = 0
    while (due := f.scheduled()) and due != ["after"]:
        [ref] = due
        v += 1
        seen.append((f.task(ref).reference_task_name, f.task(ref).input_data))
        f.complete(ref, {"v": v})
    return seen


def test_the_body_starts_with_the_loop_as_iteration_one() -> None:
    f = two_step_loop()
    loop = f.task("loop")
    assert (loop.status, loop.iteration, loop.output_data) == (TaskStatus.IN_PROGRESS, 1, {"iteration": 1})
    b1 = f.task("b1")
    assert (b1.reference_task_name, b1.iteration, b1.loop_over_task) == ("b1__1", 1, True)
    assert f.dispatched() == ["b1__1"]


def test_iterations_run_in_conductors_order_with_inputs_of_the_current_iteration() -> None:
    f = two_step_loop()
    seen = run_body(f)
    assert seen == [
        ("b1__1", {"i": 1}),
        ("b2__1", {"prev": 1}),
        ("b1__2", {"i": 2}),
        ("b2__2", {"prev": 3}),
        ("b1__3", {"i": 3}),
        ("b2__3", {"prev": 5}),
    ]
    assert f.order() == ["loop", "b1__1", "b2__1", "b1__2", "b2__2", "b1__3", "b2__3", "after"]
    assert [t.seq for t in f.history()] == list(range(1, 9))
    assert [t.iteration for t in f.history()] == [3, 1, 1, 2, 2, 3, 3, 0]


def test_the_loop_output_keeps_every_iteration_by_body_reference() -> None:
    f = two_step_loop()
    run_body(f)
    loop = f.task("loop")
    assert loop.status is TaskStatus.COMPLETED
    assert loop.output_data == {
        "iteration": 3,
        "1": {"b1": {"v": 1}, "b2": {"v": 2}},
        "2": {"b1": {"v": 3}, "b2": {"v": 4}},
        "3": {"b1": {"v": 5}, "b2": {"v": 6}},
    }


def test_only_the_current_iteration_lives_in_the_document() -> None:
    f = two_step_loop()
    f.complete("b1", {"v": 1})
    f.complete("b2", {"v": 2})
    assert sorted(f.state.tasks) == ["b1", "loop"]
    assert f.task("b1").reference_task_name == "b1__2"
    # The first iteration lives on in its task records.
    assert f.record("b2__1").status is TaskStatus.COMPLETED and f.record("b2__1").output_data == {"v": 2}


def test_after_the_loop_ref_reads_the_last_iteration_and_ref_n_reads_iteration_n() -> None:
    f = two_step_loop(last="${b1.output.v}", second="${b1__2.output.v}", count="${loop.output.iteration}")
    run_body(f)
    assert f.task("after").input_data == {"last": 5, "second": 3, "count": 3}


def test_loop_output_by_iteration_number_reads_as_in_conductor() -> None:
    """Jayway reads `.2` as a member name: ${loop.output.2.b1.v} is iteration 2's b1."""
    f = two_step_loop(second="${loop.output.2.b1.v}", whole="${loop.output.1}")
    run_body(f)
    assert f.task("after").input_data == {"second": 3, "whole": {"b1": {"v": 1}, "b2": {"v": 2}}}


def test_a_body_task_not_yet_run_this_iteration_reads_as_its_latest_earlier_one() -> None:
    loop = do_while(
        "loop",
        "$.loop.iteration < 3",
        simple("first", inputParameters={"prev": "${second.output.v}"}),
        simple("second"),
    )
    f = Flow(workflow(loop))
    assert f.task("first").input_data == {"prev": None}
    f.complete("first")
    f.complete("second", {"v": "from 1"})
    assert f.task("first").input_data == {"prev": "from 1"}
    f.complete("first")
    f.complete("second", {"v": "from 2"})
    assert f.task("first").input_data == {"prev": "from 2"}


def test_a_result_for_an_earlier_iteration_is_rejected() -> None:
    f = two_step_loop()
    stale = f.result("b1", output={"v": 99})
    f.send(stale)
    f.complete("b2", {"v": 2})
    assert f.task("b1").reference_task_name == "b1__2"
    again = f.decide(stale.model_copy(update={"id": "again"}))
    assert not again.changed
    assert [n.code for n in again.notes] == ["result_superseded"]


def test_the_condition_sees_inputs_the_loop_output_and_body_outputs_directly() -> None:
    loop = do_while(
        "loop",
        "$.limit > $.loop.iteration && $.n.result !== 'stop'",
        inline("n", "$.i == 2 ? 'stop' : 'go'", i="${loop.output.iteration}"),
        inputParameters={"limit": "${workflow.input.limit}"},
    )
    f = Flow(workflow(loop), {"limit": 5})
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.task("loop").output_data == {
        "iteration": 2,
        "1": {"n": {"result": "go"}},
        "2": {"n": {"result": "stop"}},
    }
    assert f.task("loop").input_data == {"limit": 5}


def test_a_number_condition_is_true_while_positive_and_a_string_is_false() -> None:
    f = Flow(workflow(do_while("loop", "3 - $.loop.iteration", task("NOOP", "n"))))
    assert f.order() == ["loop", "n__1", "n__2", "n__3"]
    f = Flow(workflow(do_while("loop", "'true'", task("NOOP", "n"))))
    assert f.order() == ["loop", "n__1"]


def test_the_body_runs_once_even_when_the_condition_is_false_from_the_start() -> None:
    f = Flow(workflow(do_while("loop", "false", task("NOOP", "n")), simple("after")))
    assert f.order() == ["loop", "n__1", "after"]
    assert f.task("loop").output_data == {"iteration": 1, "1": {"n": {}}}


def test_a_condition_error_fails_the_loop_terminally() -> None:
    f = Flow(workflow(do_while("loop", "$.nope.x", simple("b")), simple("after")))
    f.complete("b")
    loop = f.task("loop")
    assert loop.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert loop.reason_for_incompletion == (
        "Unable to evaluate condition $.nope.x, exception "
        "Error evaluating the script `TypeError: cannot read property 'x' of undefined`"
    )
    assert f.state.status is WorkflowStatus.FAILED
    assert "after" not in f.state.tasks


def test_a_body_task_failing_for_good_fails_the_workflow() -> None:
    f = Flow(workflow(do_while("loop", "true", simple("b")), simple("after")))
    f.fail("b", "broken")
    assert f.task("b").status is TaskStatus.FAILED
    assert f.task("loop").status is TaskStatus.CANCELED
    assert f.state.status is WorkflowStatus.FAILED
    assert "(b__1)" in (f.state.reason_for_incompletion or "")


def test_a_permissive_body_task_failing_fails_the_loop() -> None:
    f = Flow(workflow(do_while("loop", "true", simple("b", permissive=True)), simple("after")))
    f.fail("b", "broken")
    assert f.task("loop").status is TaskStatus.FAILED
    assert f.task("loop").reason_for_incompletion == "broken"
    assert f.state.status is WorkflowStatus.FAILED
    assert "after" not in f.state.tasks


def test_an_optional_body_failure_lets_the_loop_go_round() -> None:
    f = Flow(workflow(do_while("loop", "$.loop.iteration < 2", simple("b", optional=True))))
    f.fail("b", "meh")
    assert f.record("b__1").status is TaskStatus.COMPLETED_WITH_ERRORS
    assert f.task("b").reference_task_name == "b__2"
    f.complete("b", {"ok": 1})
    assert f.state.status is WorkflowStatus.COMPLETED


def test_a_body_task_retry_keeps_its_iteration_reference() -> None:
    f = Flow(workflow(do_while("loop", "false", simple("b", retries=1))))
    first = f.task("b")
    f.fail("b")
    retry = f.task("b")
    assert (retry.reference_task_name, retry.retry_count, retry.iteration) == ("b__1", 1, 1)
    assert retry.retried_task_id == first.task_id
    assert f.dispatched() == ["b__1"]


# ---- list mode ---------------------------------------------------------------------------


def squares(**fields: Any) -> dict[str, Any]:
    return do_while(
        "loop",
        fields.pop("condition", ""),
        inline("sq", "$.item * $.item", item="${loop.output.loopItem}", idx="${loop.output.loopIndex}"),
        **fields,
    )


def test_items_run_one_iteration_per_item() -> None:
    f = Flow(workflow(squares(items="${workflow.input.xs}")), {"xs": [2, 3, 4]})
    assert f.order() == ["loop", "sq__1", "sq__2", "sq__3"]
    assert [(t.input_data["item"], t.input_data["idx"]) for t in f.history()[1:]] == [(2, 0), (3, 1), (4, 2)]
    assert f.task("loop").output_data == {
        "iteration": 3,
        "loopIndex": 2,
        "loopItem": 4,
        "1": {"sq": {"result": 4}},
        "2": {"sq": {"result": 9}},
        "3": {"sq": {"result": 16}},
    }
    assert f.state.output == {"result": 16}


def test_an_empty_item_list_runs_no_iteration() -> None:
    f = Flow(workflow(squares(items="${workflow.input.xs}"), simple("after")), {"xs": []})
    assert f.task("loop").status is TaskStatus.COMPLETED
    assert f.task("loop").output_data == {"iteration": 0}
    assert f.order() == ["loop", "after"]


def test_a_scalar_item_is_a_list_of_one() -> None:
    f = Flow(workflow(squares(items="${workflow.input.xs}")), {"xs": 7})
    assert f.task("loop").output_data["1"] == {"sq": {"result": 49}}
    assert f.task("loop").iteration == 1


def test_items_with_a_condition_stop_at_whichever_ends_first() -> None:
    f = Flow(workflow(squares(items="${workflow.input.xs}", condition="$.sq.result < 5")), {"xs": [2, 3, 4]})
    assert f.order() == ["loop", "sq__1", "sq__2"]


def test_underscore_items_input_is_list_mode_too() -> None:
    f = Flow(workflow(squares(inputParameters={"_items": "${workflow.input.xs}"})), {"xs": [1, 2]})
    assert f.task("loop").output_data["2"] == {"sq": {"result": 4}}
    assert f.task("loop").output_data["loopItem"] == 2


def test_keep_last_n_trims_old_iterations_from_the_output() -> None:
    loop = do_while(
        "loop",
        "$.loop.iteration < 5",
        inline("n", "$.i", i="${loop.output.iteration}"),
        inputParameters={"keepLastN": 2},
    )
    f = Flow(workflow(loop))
    assert f.task("loop").output_data == {
        "iteration": 5,
        "4": {"n": {"result": 4}},
        "5": {"n": {"result": 5}},
    }
    assert len(f.history()) == 6  # the records of every iteration were written


# ---- nesting -----------------------------------------------------------------------------


def nested() -> Flow:
    inner = do_while(
        "inner",
        "$.inner.iteration < 2",
        inline("body", "[$.o, $.i]", o="${outer.output.iteration}", i="${inner.output.iteration}"),
    )
    return Flow(workflow(do_while("outer", "$.outer.iteration < 3", inner)))


def test_nested_loops_suffix_outer_iteration_first() -> None:
    f = nested()
    assert f.order() == [
        "outer",
        "inner__1",
        "body__1__1",
        "body__1__2",
        "inner__2",
        "body__2__1",
        "body__2__2",
        "inner__3",
        "body__3__1",
        "body__3__2",
    ]
    assert [t.output_data["result"] for t in f.history() if t.kind == "INLINE"] == [
        [1, 1],
        [1, 2],
        [2, 1],
        [2, 2],
        [3, 1],
        [3, 2],
    ]
    assert f.record("body__2__1").iteration == 1 and f.record("inner__2").iteration == 2


def test_nested_loop_outputs_nest_per_iteration() -> None:
    f = nested()
    assert f.task("outer").output_data["2"] == {
        "inner": {"iteration": 2, "1": {"body": {"result": [2, 1]}}, "2": {"body": {"result": [2, 2]}}}
    }


def test_a_fork_in_a_loop_joins_the_current_iterations_branches() -> None:
    loop = do_while(
        "loop", "$.loop.iteration < 2", fork("f", [simple("a")], [simple("b")]), join("j", "a", "b")
    )
    f = Flow(workflow(loop))
    assert f.order() == ["loop", "f__1", "a__1", "b__1", "j__1"]
    assert f.task("j").input_data == {"joinOn": ["a__1", "b__1"]}
    f.complete("a", {"x": 1})
    f.complete("b", {"y": 2})
    assert f.record("j__1").output_data == {"a__1": {"x": 1}, "b__1": {"y": 2}}
    assert f.order()[5:] == ["f__2", "a__2", "b__2", "j__2"]
    f.complete("a", {"x": 3})
    f.complete("b", {"y": 4})
    assert f.task("loop").output_data["2"] == {
        "f": {},
        "a": {"x": 3},
        "b": {"y": 4},
        "j": {"a__2": {"x": 3}, "b__2": {"y": 4}},
    }
    assert f.state.status is WorkflowStatus.COMPLETED


def test_a_switch_in_a_loop_records_only_the_case_each_iteration_took() -> None:
    loop = do_while(
        "loop",
        "$.loop.iteration < 3",
        switch(
            "s",
            "$.i % 2 == 0 ? 'even' : 'odd'",
            {"even": [inline("e", "'E' + $.i", i="${loop.output.iteration}")]},
            [inline("o", "'O' + $.i", i="${loop.output.iteration}")],
            evaluator="javascript",
            i="${loop.output.iteration}",
        ),
    )
    f = Flow(workflow(loop))
    assert f.order() == ["loop", "s__1", "o__1", "s__2", "e__2", "s__3", "o__3"]
    output = f.task("loop").output_data
    assert output["2"] == {"s": {"evaluationResult": ["even"], "selectedCase": "even"}, "e": {"result": "E2"}}
    assert output["3"]["o"] == {"result": "O3"} and "e" not in output["3"]


def test_a_wait_in_a_loop_takes_a_signal_per_iteration() -> None:
    f = Flow(workflow(do_while("loop", "$.loop.iteration < 2", task("WAIT", "w"))))
    assert not f.decide(f.start_message).changed, "nothing is due until a signal"
    f.signal("w__1", {"a": 1})
    assert f.task("w").reference_task_name == "w__2"
    f.signal("w", {"a": 2})
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.task("loop").output_data == {"iteration": 2, "1": {"w": {"a": 1}}, "2": {"w": {"a": 2}}}
