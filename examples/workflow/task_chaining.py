"""Task chaining: three activities, each fed the previous one's result (Dapr's task_chaining.py)."""

import cairn.workflow as wf

wfr = wf.WorkflowRuntime()


@wfr.workflow(name="random_workflow")
def task_chain_workflow(ctx: wf.DaprWorkflowContext, wf_input: int):
    try:
        result1 = yield ctx.call_activity(step1, input=wf_input)
        result2 = yield ctx.call_activity(step2, input=result1)
        result3 = yield ctx.call_activity(step3, input=result2)
    except Exception as e:
        yield ctx.call_activity(error_handler, input=str(e))
        raise
    return [result1, result2, result3]


@wfr.activity(name="step1")
def step1(ctx, activity_input):
    print(f"Step 1: Received input: {activity_input}.", flush=True)
    return activity_input + 1


@wfr.activity
def step2(ctx, activity_input):
    print(f"Step 2: Received input: {activity_input}.", flush=True)
    return activity_input * 2


@wfr.activity
def step3(ctx, activity_input):
    print(f"Step 3: Received input: {activity_input}.", flush=True)
    return activity_input ^ 2  # XOR, as in Dapr's example: 86 gives 84


@wfr.activity
def error_handler(ctx, error):
    print(f"Executing error handler: {error}.", flush=True)


if __name__ == "__main__":
    wfr.start()
    wf_client = wf.DaprWorkflowClient()
    instance_id = wf_client.schedule_new_workflow(workflow=task_chain_workflow, input=42)
    print(f"Workflow started. Instance ID: {instance_id}", flush=True)
    state = wf_client.wait_for_workflow_completion(instance_id)
    print(f"Workflow completed! Status: {state.runtime_status}", flush=True)
    wfr.shutdown()
