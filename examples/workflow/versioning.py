"""Named versions, patches and STALLED instances (Dapr's versioning.py).

Part 1 runs tests 1 to 8: a running instance keeps the version it started on while new ones take
the latest; is_patched lets code change under running instances; and two instances stall — one
whose version the runtime no longer has, one whose code dropped a patch it took. Part 2, run
afterwards in a new process, has the code they need: a runtime of the app starting gives them
another turn, and they finish with the events they were sent while stalled.
"""

import sys
import time

import cairn.workflow as wf

current_test = 0
wfr = None
wf_client = None
workflow_code = None


def print_activity(ctx, input):
    print(f"test{current_test}: {input}", flush=True)


def new_wfr():
    """A fresh runtime (the previous one shut down), as if the app were redeployed."""
    global wfr
    if wfr is not None:
        wfr.shutdown()
    wfr = wf.WorkflowRuntime()
    wfr.register_activity(print_activity, name="print_activity")
    return wfr


def wait_for_status(instance_id, status, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = wf_client.get_workflow_state(instance_id)
        if state is not None and state.runtime_status.name == status:
            return True
        time.sleep(0.2)
    return False


def version1_workflow(ctx: wf.DaprWorkflowContext):
    yield ctx.call_activity(print_activity, input="Received workflow call for version1")
    yield ctx.wait_for_external_event(name="event")
    yield ctx.call_activity(print_activity, input="Finished workflow for version1")
    return 1


def version2_workflow(ctx: wf.DaprWorkflowContext):
    yield ctx.call_activity(print_activity, input="Received workflow call for version2")
    yield ctx.wait_for_external_event(name="event")
    yield ctx.call_activity(print_activity, input="Finished workflow for version2")
    return 2


def patching_workflow(ctx: wf.DaprWorkflowContext):
    return (yield from workflow_code(ctx))


def run(workflow, instance_id, then=None):
    """Schedule `workflow` (by name), let it reach its wait, optionally change the code, raise
    the event and wait for the instance to end."""
    print(f"test{current_test}: triggering workflow", flush=True)
    wf_client.schedule_new_workflow(workflow=workflow, instance_id=instance_id)
    time.sleep(1)
    if then is not None:
        then()
    wf_client.raise_workflow_event(instance_id, "event")
    wf_client.wait_for_workflow_completion(instance_id, timeout_in_seconds=30)


def part1():
    global current_test, wf_client, workflow_code
    new_wfr()
    wfr.versioned_workflow(name="workflow", is_latest=True)(version1_workflow)
    wfr.register_workflow(patching_workflow)
    wfr.start()
    wf_client = wf.DaprWorkflowClient()

    current_test = 1  # a new instance takes the latest version
    run("workflow", "versioning-test1")

    current_test = 2  # a running instance keeps its version when a new one is registered
    run(
        "workflow",
        "versioning-test2",
        then=lambda: wfr.versioned_workflow(name="workflow", is_latest=True)(version2_workflow),
    )

    current_test = 3  # a new instance takes the new latest
    run("workflow", "versioning-test3")

    def start_code(ctx):
        yield ctx.call_activity(print_activity, input="start")

    def code4(ctx):
        yield from start_code(ctx)
        if ctx.is_patched("patch1"):
            yield ctx.call_activity(print_activity, input="patch1 is patched")
        else:
            yield ctx.call_activity(print_activity, input="patch1 is not patched")

    current_test = 4  # a new instance runs the patched code
    workflow_code = code4
    wf_client.schedule_new_workflow(workflow="patching_workflow", instance_id="versioning-test4")
    wf_client.wait_for_workflow_completion("versioning-test4", timeout_in_seconds=30)

    def code5_before(ctx):
        yield from start_code(ctx)
        yield ctx.wait_for_external_event(name="event")
        if ctx.is_patched("patch2"):
            yield ctx.call_activity(print_activity, input="patch2 is patched")
        else:
            yield ctx.call_activity(print_activity, input="patch2 is not patched")

    def code5_after(ctx):
        yield from start_code(ctx)
        if ctx.is_patched("patch1"):  # added while the instance waits: its history predates it
            yield ctx.call_activity(print_activity, input="patch1 is patched")
        else:
            yield ctx.call_activity(print_activity, input="patch1 is not patched")
        yield from code5_before_rest(ctx)

    def code5_before_rest(ctx):
        yield ctx.wait_for_external_event(name="event")
        if ctx.is_patched("patch2"):
            yield ctx.call_activity(print_activity, input="patch2 is patched")
        else:
            yield ctx.call_activity(print_activity, input="patch2 is not patched")

    current_test = 5
    workflow_code = code5_before

    def swap5():
        global workflow_code
        workflow_code = code5_after

    run("patching_workflow", "versioning-test5", then=swap5)

    def code6_before(ctx):
        yield from start_code(ctx)
        ctx.is_patched("patch1")  # taken silently by a new instance
        yield from code5_before_rest(ctx)

    def code6_after(ctx):
        yield from start_code(ctx)
        if ctx.is_patched("patch1"):
            yield ctx.call_activity(print_activity, input="patch1 is patched")
        else:
            yield ctx.call_activity(print_activity, input="patch1 is not patched")
        yield from code5_before_rest(ctx)

    current_test = 6
    workflow_code = code6_before

    def swap6():
        global workflow_code
        workflow_code = code6_after

    run("patching_workflow", "versioning-test6", then=swap6)

    current_test = 7  # the version an instance started on is gone: it stalls
    new_wfr()
    wfr.versioned_workflow(name="stall_workflow", is_latest=True)(stall_version1_workflow)
    wfr.start()
    wf_client.schedule_new_workflow(workflow="stall_workflow", instance_id="versioning-test7")
    time.sleep(1)
    new_wfr()
    wfr.versioned_workflow(name="stall_workflow", is_latest=True)(stall_version2_workflow)
    wfr.start()
    wf_client.raise_workflow_event("versioning-test7", "event")
    if wait_for_status("versioning-test7", "STALLED"):
        print("test7: Workflow is stalled", flush=True)

    current_test = 8  # the code dropped a patch the instance took: it stalls

    def code8_before(ctx):
        ctx.is_patched("patch1")
        yield ctx.wait_for_external_event(name="event")

    def code8_after(ctx):
        yield ctx.wait_for_external_event(name="event")

    new_wfr()
    wfr.register_workflow(patching_workflow)
    wfr.start()
    workflow_code = code8_before
    wf_client.schedule_new_workflow(workflow="patching_workflow", instance_id="versioning-test8")
    time.sleep(1)
    workflow_code = code8_after
    wf_client.raise_workflow_event("versioning-test8", "event")
    if wait_for_status("versioning-test8", "STALLED"):
        print("test8: Workflow is stalled", flush=True)
    wfr.shutdown()


def stall_version1_workflow(ctx: wf.DaprWorkflowContext):
    yield ctx.call_activity(print_activity, input="Received workflow call for version1")
    yield ctx.wait_for_external_event(name="event")
    yield ctx.call_activity(print_activity, input="Finished stalled version1 workflow")


def stall_version2_workflow(ctx: wf.DaprWorkflowContext):
    yield ctx.call_activity(print_activity, input="Received workflow call for version2")
    yield ctx.wait_for_external_event(name="event")
    yield ctx.call_activity(print_activity, input="Finished stalled version2 workflow")


def part2():
    global current_test, wf_client, workflow_code
    current_test = 100
    print("test100: part2", flush=True)

    def patched_code(ctx):
        ctx.is_patched("patch1")
        yield ctx.wait_for_external_event(name="event")
        yield ctx.call_activity(print_activity, input="Finished stalled patching workflow")

    workflow_code = patched_code
    new_wfr()
    wfr.versioned_workflow(name="stall_workflow", is_latest=False)(stall_version1_workflow)
    wfr.versioned_workflow(name="stall_workflow", is_latest=True)(stall_version2_workflow)
    wfr.register_workflow(patching_workflow)
    wfr.start()  # the app's runtime is back with the code the stalled instances need
    wf_client = wf.DaprWorkflowClient()
    for instance_id in ("versioning-test7", "versioning-test8"):
        wf_client.wait_for_workflow_completion(instance_id, timeout_in_seconds=30)
    wfr.shutdown()


if __name__ == "__main__":
    part1() if sys.argv[1:] == ["part1"] else part2()
