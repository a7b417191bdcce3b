"""Workers for the operator examples in examples/operators/. Run them with
`cairn worker examples.operator_workers` next to `cairn dev`.

Deterministic on purpose: the same input always gives the same output, so the examples double
as end-to-end tests (tests/e2e/test_operators_dev_e2e.py checks every example's output)."""

from typing import Any

from cairn import worker

PRICES = {"book": 12.5, "pen": 1.25, "lamp": 30.0}


@worker("fetch_order")
def fetch_order(request: dict[str, Any]) -> dict[str, Any]:
    order_id = str(request["orderId"])
    return {
        "orderId": order_id,
        "items": [{"sku": "book", "qty": 2}, {"sku": "pen", "qty": 3}],
        "country": request.get("country", "FR"),
        "email": f"{order_id}@example.com",
    }


@worker("price_item")
def price_item(item: dict[str, Any]) -> dict[str, Any]:
    return {"sku": item["sku"], "amount": PRICES.get(item["sku"], 5.0) * int(item.get("qty", 1))}


@worker("ship")
def ship(parcel: dict[str, Any]) -> dict[str, Any]:
    return {"trackingId": f"{parcel['carrier']}-{parcel['orderId']}", "carrier": parcel["carrier"]}


@worker("notify")
def notify(message: dict[str, Any]) -> dict[str, Any]:
    return {"sent": True, "to": message["to"], "text": message["text"]}


@worker("list_tools")
def list_tools(request: dict[str, Any]) -> dict[str, Any]:
    return {"tools": ["search", "finish"]}


@worker("think")
def think(context: dict[str, Any]) -> dict[str, Any]:
    """Stands in for a model call: search twice, then finish with what was found."""
    iteration = int(context["iteration"])
    if iteration < 3:
        return {"action": "search", "query": f"{context['goal']} #{iteration}"}
    return {"action": "finish", "answer": f"done after {iteration - 1} searches: {context.get('last')}"}


@worker("search_tool")
def search_tool(call: dict[str, Any]) -> dict[str, Any]:
    """Stands in for an MCP tool call."""
    return {"result": f"results for {call['query']}"}
