"""A workflow that calls a child workflow under an instance id it chooses (Dapr's child_workflow.py)."""

import cairn.workflow as wf

wfr = wf.WorkflowRuntime()


@wfr.workflow
def main_workflow(ctx: wf.DaprWorkflowContext):
    try:
        instance_id = ctx.instance_id
        child_instance_id = instance_id + "-child"
        print(f"*** Calling child workflow {child_instance_id}", flush=True)
        yield ctx.call_child_workflow(workflow=child_workflow, input=None, instance_id=child_instance_id)
    except Exception as e:
        print(f"*** Exception: {e}", flush=True)
    return


@wfr.workflow
def child_workflow(ctx: wf.DaprWorkflowContext):
    instance_id = ctx.instance_id
    print(f"*** Child workflow {instance_id} called", flush=True)


if __name__ == "__main__":
    wfr.start()
    wf_client = wf.DaprWorkflowClient()
    instance_id = wf_client.schedule_new_workflow(workflow=main_workflow)
    wf_client.wait_for_workflow_completion(instance_id)
    wfr.shutdown()
