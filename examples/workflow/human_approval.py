"""Human approval with a timeout: an order above a threshold waits for an approval event or gives
up after 24 hours (Dapr's human_approval.py; the approval is raised with DaprWorkflowClient)."""

import argparse
import threading
from dataclasses import asdict, dataclass
from datetime import timedelta

import cairn.workflow as wf

wfr = wf.WorkflowRuntime()


@dataclass
class Order:
    cost: float
    product: str
    quantity: int

    def __str__(self):
        return f"{self.product} ({self.quantity})"


@dataclass
class Approval:
    approver: str

    @staticmethod
    def from_dict(d):
        return Approval(**d)


@wfr.workflow(name="purchase_order_wf")
def purchase_order_workflow(ctx: wf.DaprWorkflowContext, order: Order):
    if order.cost < 1000:
        return "Auto-approved"
    yield ctx.call_activity(send_approval_request, input=order)
    approval_event = ctx.wait_for_external_event("approval_received")
    timeout_event = ctx.create_timer(timedelta(hours=24))
    winner = yield wf.when_any([approval_event, timeout_event])
    if winner == timeout_event:
        return "Cancelled"
    yield ctx.call_activity(place_order, input=order)
    approval_details = Approval.from_dict(approval_event.get_result())
    return f"Approved by '{approval_details.approver}'"


@wfr.activity(name="send_approval")
def send_approval_request(_, order: Order) -> None:
    print(f"*** Requesting approval from user for order: {order}", flush=True)


@wfr.activity
def place_order(_, order: Order) -> None:
    print(f"*** Placing order: {order}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Order purchasing workflow demo.")
    parser.add_argument("--cost", type=int, default=2000, help="Cost of the order")
    parser.add_argument("--approver", type=str, default="Me", help="Approver name")
    parser.add_argument("--timeout", type=int, default=60, help="Timeout in seconds")
    args = parser.parse_args()

    wfr.start()
    wf_client = wf.DaprWorkflowClient()
    order = Order(args.cost, "MyProduct", 1)
    instance_id = wf_client.schedule_new_workflow(purchase_order_workflow, input=order)

    def prompt_for_approval():
        input("Press [ENTER] to approve the order...\n")
        wf_client.raise_workflow_event(instance_id, "approval_received", data=asdict(Approval(args.approver)))

    if args.cost >= 1000:
        threading.Thread(target=prompt_for_approval, daemon=True).start()
    try:
        state = wf_client.wait_for_workflow_completion(instance_id, timeout_in_seconds=args.timeout + 2)
        if not state:
            print("Workflow not found!")
        elif state.runtime_status.name == "COMPLETED":
            print(f"Workflow completed! Result: {state.serialized_output}", flush=True)
        else:
            print(f"Workflow failed! Status: {state.runtime_status.name}", flush=True)
    except TimeoutError:
        print("*** Workflow timed out!", flush=True)
    wfr.shutdown()
