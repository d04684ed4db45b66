"""Order events for the demo: deterministic (seeded), a few malformed on purpose, and the
audit rules (which failures are transient, which are poison)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

PRODUCTS = {
    "espresso": 2.5,
    "flat-white": 3.4,
    "croissant": 2.9,
    "bagel": 3.1,
    "tea": 2.2,
    "muffin": 3.0,
}
MALFORMED_EVERY = 40  # one order in 40 is sent broken
TRANSIENT_EVERY = 15  # the audit fails these once, then they pass on retry


@dataclass(frozen=True)
class Order:
    order_id: int
    product: str
    quantity: int
    price: float
    ts: int  # event time, epoch milliseconds

    @property
    def revenue(self) -> float:
        return self.quantity * self.price


def make_orders(n: int, start_ms: int, span_minutes: int = 10, seed: int = 7) -> list[Order]:
    rng = random.Random(seed)
    span = span_minutes * 60_000
    orders = []
    for i in range(n):
        product = rng.choice(sorted(PRODUCTS))
        orders.append(
            Order(i, product, rng.randint(1, 4), PRODUCTS[product], start_ms + rng.randrange(span))
        )
    return orders


def encode(order: Order) -> bytes:
    """The JSON body; every MALFORMED_EVERY-th order is cut short (not JSON any more)."""
    text = json.dumps(
        {
            "order_id": order.order_id,
            "product": order.product,
            "quantity": order.quantity,
            "price": order.price,
            "ts": order.ts,
        }
    )
    if is_malformed(order.order_id):
        text = text[: len(text) // 2]
    return text.encode()


def is_malformed(order_id: int) -> bool:
    return order_id % MALFORMED_EVERY == MALFORMED_EVERY - 1


def is_transient(order_id: int) -> bool:
    return order_id % TRANSIENT_EVERY == 3 and not is_malformed(order_id)


class TransientAuditError(Exception):
    """The audit service 'timed out'; the message is retried by the broker."""


def audit(body: bytes, reconsume_times: int) -> int:
    """Check one order; returns its id. Malformed bodies raise every time (poison: they end
    in the DLQ); transient ones raise on the first delivery only."""
    doc = json.loads(body)  # ValueError on a malformed order, on every attempt
    order_id = int(doc["order_id"])
    if is_transient(order_id) and reconsume_times == 0:
        raise TransientAuditError(f"order {order_id}: audit service timed out")
    return order_id
