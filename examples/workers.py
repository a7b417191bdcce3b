"""Workers for examples/order_pipeline.json. Run them with `cairn worker examples.workers`."""

import asyncio
import hashlib
import random
from typing import Any

from cairn import worker

PRICES = {"book": 12.5, "pen": 1.25, "lamp": 30.0}


@worker("reserve_stock")
async def reserve_stock(order: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0.05)
    total = sum(PRICES.get(item, 5.0) for item in order.get("items", []))
    return {"reserved": len(order.get("items", [])), "total": round(total, 2)}


@worker("charge_card")
async def charge_card(charge: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0.1)
    if random.random() < 0.2:
        raise ConnectionError("payment gateway timed out")  # retried with exponential backoff
    payment = hashlib.sha1(str(charge["orderId"]).encode()).hexdigest()[:10]
    return {"paymentId": f"pay_{payment}", "amount": charge["amount"]}


@worker("send_receipt")
def send_receipt(message: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": f"msg-{abs(hash(message['text'])) % 10**8}", "to": message["to"]}
