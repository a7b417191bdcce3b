"""Retries, a retried child, pause and resume, an event racing a timer, and purge (Dapr's simple.py)."""

import time
from datetime import timedelta

import cairn.workflow as wf

counter = 0
retry_count = 0
child_orchestrator_count = 0
child_orchestrator_string = ""
child_act_retry_count = 0
instance_id = "exampleInstanceID"
child_instance_id = "childInstanceID"
workflow_name = "hello_world_wf"
child_workflow_name = "child_wf"
input_data = "Hi Counter!"
event_name = "event1"
event_data = "eventData"
non_existent_id_error = "no such instance exists"

retry_policy = wf.RetryPolicy(
    first_retry_interval=timedelta(seconds=1),
    max_number_of_attempts=3,
    backoff_coefficient=2,
    max_retry_interval=timedelta(seconds=10),
    retry_timeout=timedelta(seconds=100),
)

wfr = wf.WorkflowRuntime()


@wfr.workflow(name="hello_world_wf")
def hello_world_wf(ctx: wf.DaprWorkflowContext, wf_input):
    print(f"{wf_input}", flush=True)
    yield ctx.call_activity(hello_act, input=1)
    yield ctx.call_activity(hello_act, input=10)
    yield ctx.call_activity(hello_retryable_act, retry_policy=retry_policy)
    yield ctx.call_child_workflow(child_retryable_wf, retry_policy=retry_policy)
    event = ctx.wait_for_external_event(event_name)
    timeout = ctx.create_timer(timedelta(seconds=30))
    winner = yield wf.when_any([event, timeout])
    if winner == timeout:
        print("Workflow timed out", flush=True)
        return "Timeout"
    yield ctx.call_activity(hello_act, input=100)
    yield ctx.call_activity(hello_act, input=1000)
    return "Completed"


@wfr.activity(name="hello_act")
def hello_act(ctx: wf.WorkflowActivityContext, wf_input):
    global counter
    counter += wf_input
    print(f"New counter value is: {counter}!", flush=True)


@wfr.activity(name="hello_retryable_act")
def hello_retryable_act(ctx: wf.WorkflowActivityContext):
    global retry_count
    if (retry_count % 2) == 0:
        print(f"Retry count value is: {retry_count}!", flush=True)
        retry_count += 1
        raise ValueError("Retryable Error")
    print(f"Retry count value is: {retry_count}! This print statement verifies retry", flush=True)
    retry_count += 1


@wfr.workflow(name="child_retryable_wf")
def child_retryable_wf(ctx: wf.DaprWorkflowContext):
    global child_orchestrator_string, child_orchestrator_count
    if not ctx.is_replaying:
        child_orchestrator_count += 1
        print(f"Appending {child_orchestrator_count} to child_orchestrator_string!", flush=True)
        child_orchestrator_string += str(child_orchestrator_count)
    yield ctx.call_activity(act_for_child_wf, input=child_orchestrator_count, retry_policy=retry_policy)
    if child_orchestrator_count < 3:
        raise ValueError("Failing workflow")


@wfr.activity(name="act_for_child_wf")
def act_for_child_wf(ctx: wf.WorkflowActivityContext, inp):
    global child_orchestrator_string, child_act_retry_count
    inp_char = chr(96 + inp)
    print(f"Appending {inp_char} to child_orchestrator_string!", flush=True)
    child_orchestrator_string += inp_char
    if child_act_retry_count % 2 == 0:
        child_act_retry_count += 1
        raise ValueError("Retryable Error")
    child_act_retry_count += 1


def wait_until(condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


def main():
    wfr.start()
    wf_client = wf.DaprWorkflowClient()

    print("==========Start Counter Increase as per Input:==========", flush=True)
    wf_client.schedule_new_workflow(workflow=hello_world_wf, input=input_data, instance_id=instance_id)
    wf_client.wait_for_workflow_start(instance_id)

    # Dapr's example sleeps 12 s here; the retries are done sooner, so wait only until they are.
    wait_until(lambda: child_orchestrator_string == "1aa2bb3cc" and counter == 11, 12)
    assert counter == 11
    assert retry_count == 2
    assert child_orchestrator_string == "1aa2bb3cc"

    wf_client.pause_workflow(instance_id=instance_id)
    metadata = wf_client.get_workflow_state(instance_id=instance_id)
    print(f"Get response from {workflow_name} after pause call: {metadata.runtime_status.name}", flush=True)

    wf_client.resume_workflow(instance_id=instance_id)
    metadata = wf_client.get_workflow_state(instance_id=instance_id)
    print(f"Get response from {workflow_name} after resume call: {metadata.runtime_status.name}", flush=True)

    time.sleep(2)
    wf_client.raise_workflow_event(instance_id=instance_id, event_name=event_name, data=event_data)

    state = wf_client.wait_for_workflow_completion(instance_id, timeout_in_seconds=30)
    if state.runtime_status.name == "COMPLETED":
        print("Workflow completed! Result: {}".format(state.serialized_output.strip('"')), flush=True)
    else:
        print(f"Workflow failed! Status: {state.runtime_status.name}", flush=True)

    wf_client.purge_workflow(instance_id=instance_id)
    if wf_client.get_workflow_state(instance_id=instance_id) is None:
        print("Instance Successfully Purged", flush=True)
    wfr.shutdown()


if __name__ == "__main__":
    main()
