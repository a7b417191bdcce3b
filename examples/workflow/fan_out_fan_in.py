"""Fan-out/fan-in: a batch of work items processed in parallel, then their results summed
(Dapr's fan_out_fan_in.py)."""

import time

import cairn.workflow as wf

wfr = wf.WorkflowRuntime()


@wfr.workflow(name="batch_processing")
def batch_processing_workflow(ctx: wf.DaprWorkflowContext, wf_input: int):
    work_batch = yield ctx.call_activity(get_work_batch, input=wf_input)
    parallel_tasks = [ctx.call_activity(process_work_item, input=item) for item in work_batch]
    outputs = yield wf.when_all(parallel_tasks)
    total = sum(outputs)
    yield ctx.call_activity(process_results, input=total)


@wfr.activity(name="get_batch")
def get_work_batch(ctx, batch_size: int) -> list[int]:
    return [i + 1 for i in range(batch_size)]


@wfr.activity
def process_work_item(ctx, work_item: int) -> int:
    print(f"Processing work item: {work_item}.", flush=True)
    time.sleep(1)
    result = work_item * 2
    print(f"Work item {work_item} processed. Result: {result}.", flush=True)
    return result


@wfr.activity(name="final_process")
def process_results(ctx, final_result: int):
    print(f"Final result: {final_result}.", flush=True)


if __name__ == "__main__":
    wfr.start()
    wf_client = wf.DaprWorkflowClient()
    instance_id = wf_client.schedule_new_workflow(workflow=batch_processing_workflow, input=10)
    print(f"Workflow started. Instance ID: {instance_id}", flush=True)
    state = wf_client.wait_for_workflow_completion(instance_id)
    print(f"Workflow completed! Status: {state.runtime_status}", flush=True)
    wfr.shutdown()
