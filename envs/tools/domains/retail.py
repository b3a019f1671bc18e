"""Retail: an online shop's customer service — orders, cancellations, address changes, returns.

Rules the agent must follow (each refusal is a `RuleViolation` with this name):
``identity_required`` (authenticate the customer before any change),
``not_your_order`` (changes only to the authenticated customer's orders),
``cancel_only_pending``, ``address_only_pending``, ``refund_only_delivered``,
``return_quantity_exceeded`` (and ``identity_failed`` for a wrong zip code).
Prices are integer cents. The seed is fixed (`random.Random(7)`), so tasks can
name real orders. Left out: payments, stock.

The answer fields (`RetailAnswer`): the order status, an amount in cents, a
quantity, the refusing rule, the customer's id. Tasks (54): single requests
(cancel, address, return, status), requests a rule forbids (``retail-refuse-*``:
the golden actions only read, the database must stay unchanged, and the answer
gives the rule and the fact behind it, read from the database), and two-write
requests (``retail-multi``).
"""

from __future__ import annotations

import random
import sqlite3
from typing import Annotated, Literal

from pydantic import Field

from agentenv import Task
from agentenv.envs.tools.domain import Answer, Domain, NotFound, Request, RuleViolation, gold_task

Id = Annotated[str, Field(min_length=1, max_length=40, description="An id as shown by the tools, e.g. O1001.")]
Email = Annotated[str, Field(min_length=3, max_length=120)]
Rule = Literal[
    "identity_required",
    "identity_failed",
    "not_your_order",
    "cancel_only_pending",
    "address_only_pending",
    "refund_only_delivered",
    "return_quantity_exceeded",
]
Status = Literal["pending", "shipped", "delivered", "cancelled"]


class RetailAnswer(Answer):
    rule: Rule | None = Field(None, description="Only when you refuse: the rule that forbids the request.")
    order_status: Status | None = Field(
        None, description="The status of the order the customer asked about, or of the order you refuse to change."
    )
    amount_cents: Annotated[int, Field(ge=0, le=10**9)] | None = Field(
        None,
        description="The amount the customer asked about, in integer cents: an order's total, or what "
        "they get back (the sum, for several returns).",
    )
    quantity: Annotated[int, Field(ge=0, le=1000)] | None = Field(
        None, description="When you refuse a return of more items than allowed: how many can still be returned."
    )
    customer_id: Annotated[str, Field(min_length=1, max_length=40)] | None = Field(
        None, description="When you refuse to change an order that is not the customer's: their own customer id."
    )


SCHEMA = """
CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE NOT NULL, zip TEXT NOT NULL);
CREATE TABLE products (id TEXT PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE orders (id TEXT PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id),
                     status TEXT NOT NULL, address TEXT NOT NULL, cancel_reason TEXT);
CREATE TABLE order_items (order_id TEXT NOT NULL REFERENCES orders(id), product_id TEXT NOT NULL,
                          quantity INTEGER NOT NULL, price_cents INTEGER NOT NULL, returned INTEGER NOT NULL DEFAULT 0,
                          PRIMARY KEY (order_id, product_id));
CREATE TABLE refunds (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL, product_id TEXT NOT NULL,
                      quantity INTEGER NOT NULL, amount_cents INTEGER NOT NULL, reason TEXT NOT NULL);
CREATE TABLE session (customer_id TEXT NOT NULL);
"""

FIRST = ["Ada", "Ben", "Chloe", "Dev", "Ema", "Farid", "Gina", "Hugo", "Iris", "Jon", "Kemal", "Lena"]
LAST = ["Moreau", "Okafor", "Silva", "Tanaka", "Novak", "Haddad"]
PRODUCTS = [
    ("P10", "Desk lamp", 2499),
    ("P11", "Kettle", 3450),
    ("P12", "Headphones", 8999),
    ("P13", "Backpack", 5900),
    ("P14", "Water bottle", 1599),
    ("P15", "Keyboard", 7450),
    ("P16", "Yoga mat", 2890),
    ("P17", "Notebook", 650),
]
STATUSES = ["pending", "shipped", "delivered"]

retail = Domain(
    "retail",
    schema=SCHEMA,
    seed=lambda db: _seed(db),
    ignore_tables=("session",),  # who is logged in: bookkeeping
    ignore_columns={"refunds": ("id",)},  # drawn by the database, not chosen by the agent
    instructions=(
        "You are a customer-service agent for an online shop. Authenticate the customer (email + zip code) "
        "before changing anything, and change only their own orders. Only pending orders can be cancelled or "
        "have their address changed; only delivered items can be returned for a refund."
    ),
    tasks=lambda: _tasks(),
    answer=RetailAnswer,
)
DOMAIN = retail


class FindCustomer(Request):
    """Look up a customer by email."""

    email: Email


class Authenticate(Request):
    """Verify the customer's identity; required before any change."""

    email: Email
    zip: Annotated[str, Field(min_length=1, max_length=10, description="The customer's zip code.")]


class OrderRef(Request):
    order_id: Id


class CustomerRef(Request):
    customer_id: Id


class CancelOrder(Request):
    order_id: Id
    reason: Literal["no_longer_needed", "ordered_by_mistake"]


class UpdateAddress(Request):
    order_id: Id
    address: Annotated[str, Field(min_length=5, max_length=200, description="The full new shipping address.")]


class ReturnItem(Request):
    order_id: Id
    product_id: Id
    quantity: Annotated[int, Field(ge=1, le=100)]
    reason: Literal["damaged", "wrong_item", "not_needed"]


class SearchProducts(Request):
    """Products whose name contains the text (case-insensitive)."""

    text: Annotated[str, Field(max_length=80)]


@retail.route()
def find_customer(db: sqlite3.Connection, req: FindCustomer) -> dict:
    """Look up a customer by email: their id and name."""
    row = db.execute("SELECT id, name FROM customers WHERE email = ?", (req.email,)).fetchone()
    if row is None:
        raise NotFound(f"no customer with email {req.email!r}")
    return {"customer_id": row[0], "name": row[1]}


@retail.route(write=True)
def authenticate(db: sqlite3.Connection, req: Authenticate) -> dict:
    """Verify the customer's identity with email and zip code; required before any change."""
    row = db.execute("SELECT id FROM customers WHERE email = ? AND zip = ?", (req.email, req.zip)).fetchone()
    if row is None:
        raise RuleViolation("identity_failed", "email and zip code do not match a customer")
    db.execute("DELETE FROM session")
    db.execute("INSERT INTO session (customer_id) VALUES (?)", (row[0],))
    return {"authenticated": True, "customer_id": row[0]}


@retail.route()
def list_orders(db: sqlite3.Connection, req: CustomerRef) -> list:
    """A customer's orders: id and status."""
    rows = db.execute("SELECT id, status FROM orders WHERE customer_id = ? ORDER BY id", (req.customer_id,))
    return [{"order_id": i, "status": s} for i, s in rows]


@retail.route()
def get_order(db: sqlite3.Connection, req: OrderRef) -> dict:
    """An order: status, address, items and total in cents."""
    order = db.execute("SELECT customer_id, status, address FROM orders WHERE id = ?", (req.order_id,)).fetchone()
    if order is None:
        raise NotFound(f"no order {req.order_id!r}")
    items = db.execute(
        "SELECT product_id, quantity, price_cents, returned FROM order_items WHERE order_id = ? ORDER BY product_id",
        (req.order_id,),
    ).fetchall()
    return {
        "order_id": req.order_id,
        "customer_id": order[0],
        "status": order[1],
        "address": order[2],
        "items": [{"product_id": p, "quantity": q, "price_cents": c, "returned": r} for p, q, c, r in items],
        "total_cents": sum(q * c for _, q, c, _ in items),
    }


@retail.route()
def search_products(db: sqlite3.Connection, req: SearchProducts) -> list:
    """Products whose name contains the text: id, name, price in cents."""
    rows = db.execute(
        "SELECT id, name, price_cents FROM products WHERE name LIKE ? ESCAPE '\\' ORDER BY id",
        (f"%{_escape_like(req.text)}%",),
    )
    return [{"product_id": i, "name": n, "price_cents": p} for i, n, p in rows]


@retail.route(write=True)
def cancel_order(db: sqlite3.Connection, req: CancelOrder) -> str:
    """Cancel a pending order of the authenticated customer."""
    status = _own_order(db, req.order_id)
    if status != "pending":
        raise RuleViolation(
            "cancel_only_pending", f"order {req.order_id} is {status}; only pending orders can be cancelled"
        )
    db.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE id = ?", (req.reason, req.order_id))
    return f"order {req.order_id} cancelled"


@retail.route(write=True)
def update_address(db: sqlite3.Connection, req: UpdateAddress) -> str:
    """Change the shipping address of a pending order of the authenticated customer."""
    status = _own_order(db, req.order_id)
    if status != "pending":
        raise RuleViolation("address_only_pending", f"order {req.order_id} is {status}; its address cannot change")
    db.execute("UPDATE orders SET address = ? WHERE id = ?", (req.address, req.order_id))
    return f"address of order {req.order_id} updated"


@retail.route(write=True)
def return_item(db: sqlite3.Connection, req: ReturnItem) -> dict:
    """Return delivered items of the authenticated customer's order; refunds their price."""
    status = _own_order(db, req.order_id)
    if status != "delivered":
        raise RuleViolation(
            "refund_only_delivered", f"order {req.order_id} is {status}; only delivered items are refunded"
        )
    item = db.execute(
        "SELECT quantity, returned, price_cents FROM order_items WHERE order_id = ? AND product_id = ?",
        (req.order_id, req.product_id),
    ).fetchone()
    if item is None:
        raise NotFound(f"order {req.order_id} has no product {req.product_id!r}")
    if req.quantity > item[0] - item[1]:
        raise RuleViolation("return_quantity_exceeded", f"only {item[0] - item[1]} can still be returned")
    amount = req.quantity * item[2]
    db.execute(
        "UPDATE order_items SET returned = returned + ? WHERE order_id = ? AND product_id = ?",
        (req.quantity, req.order_id, req.product_id),
    )
    db.execute(
        "INSERT INTO refunds (order_id, product_id, quantity, amount_cents, reason) VALUES (?, ?, ?, ?, ?)",
        (req.order_id, req.product_id, req.quantity, amount, req.reason),
    )
    return {"refund_cents": amount, "refund": _dollars(amount)}


def _own_order(db: sqlite3.Connection, order_id: str) -> str:
    """The order's status, after the identity and ownership rules."""
    session = db.execute("SELECT customer_id FROM session").fetchone()
    if session is None:
        raise RuleViolation("identity_required", "authenticate the customer before changing an order")
    row = db.execute("SELECT customer_id, status FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        raise NotFound(f"no order {order_id!r}")
    if row[0] != session[0]:
        raise RuleViolation("not_your_order", f"order {order_id} does not belong to the authenticated customer")
    return row[1]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _dollars(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


# -- seed data and tasks (deterministic) ---------------------------------------------


def _customers() -> list[tuple[str, str, str, str]]:
    rng = random.Random(7)
    out = []
    for i, first in enumerate(FIRST):
        last = LAST[i % len(LAST)]
        out.append(
            (
                f"C{100 + i}",
                f"{first} {last}",
                f"{first.lower()}.{last.lower()}@example.com",
                f"{rng.randint(10000, 99999)}",
            )
        )
    return out


def _orders() -> list[tuple[str, str, str, str, list[tuple[str, int, int]]]]:
    """(order id, customer id, status, address, [(product, quantity, price)])."""
    rng = random.Random(8)
    out = []
    for k in range(36):
        customer = f"C{100 + k % len(FIRST)}"
        picks = rng.sample(PRODUCTS, rng.randint(1, 2))
        items = [(pid, rng.randint(1, 3), price) for pid, _, price in picks]
        out.append((f"O{1001 + k}", customer, STATUSES[k % 3], f"{rng.randint(1, 99)} Main St, Springfield", items))
    return out


def _seed(db: sqlite3.Connection) -> None:
    db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", _customers())
    db.executemany("INSERT INTO products VALUES (?, ?, ?)", PRODUCTS)
    for order_id, customer, status, address, items in _orders():
        db.execute(
            "INSERT INTO orders (id, customer_id, status, address) VALUES (?, ?, ?, ?)",
            (order_id, customer, status, address),
        )
        db.executemany(
            "INSERT INTO order_items (order_id, product_id, quantity, price_cents) VALUES (?, ?, ?, ?)",
            [(order_id, p, q, c) for p, q, c in items],
        )


def _tasks() -> list[Task]:
    return _single_tasks() + _refusal_tasks() + _multi_step_tasks()


def _introduce(customer_id: str) -> tuple[str, tuple[str, dict]]:
    """The customer's self-introduction and the authenticate action it allows."""
    _, name, email, zip_code = {c[0]: c for c in _customers()}[customer_id]
    return f"Hi, I'm {name} ({email}, zip {zip_code}).", ("authenticate", {"email": email, "zip": zip_code})


def _by_status(status: str) -> list[tuple[str, str, str, str, list[tuple[str, int, int]]]]:
    return [o for o in _orders() if o[2] == status]


def _single_tasks() -> list[Task]:
    customers = {c[0]: c for c in _customers()}
    tasks: list[Task] = []
    for k, (order_id, cid, status, _, items) in enumerate(_orders()):
        _, name, email, zip_code = customers[cid]
        me = f"Hi, I'm {name} ({email}, zip {zip_code})."
        auth = ("authenticate", {"email": email, "zip": zip_code})
        kind = ("cancel", "address", "status")[k // 3 % 3] if status == "pending" else status
        if kind == "cancel":
            tasks.append(
                gold_task(
                    f"retail-cancel-{order_id}",
                    f"{me} Please cancel order {order_id}; I ordered it by mistake.",
                    [
                        auth,
                        ("get_order", {"order_id": order_id}),
                        ("cancel_order", {"order_id": order_id, "reason": "ordered_by_mistake"}),
                    ],
                    answer=f"Order {order_id} is cancelled.",
                    family="retail-cancel",
                    difficulty=1,
                )
            )
        elif kind == "address":
            new = f"{10 + k} Elm Road, Shelbyville"
            tasks.append(
                gold_task(
                    f"retail-address-{order_id}",
                    f"{me} Please ship order {order_id} to {new} instead.",
                    [auth, ("update_address", {"order_id": order_id, "address": new})],
                    answer=f"Order {order_id} will ship to {new}.",
                    family="retail-address",
                    difficulty=1,
                )
            )
        elif kind == "delivered":
            product, quantity, price = items[0]
            refund = _dollars(quantity * price)
            tasks.append(
                gold_task(
                    f"retail-return-{order_id}",
                    f"{me} All {quantity} of product {product} in order {order_id} arrived damaged. "
                    "I want to return them. How much will I get back?",
                    [
                        auth,
                        ("get_order", {"order_id": order_id}),
                        (
                            "return_item",
                            {"order_id": order_id, "product_id": product, "quantity": quantity, "reason": "damaged"},
                        ),
                    ],
                    answer=f"Your return is accepted; you will be refunded {refund}.",
                    expect={"amount_cents": quantity * price},
                    family="retail-return",
                    difficulty=2,
                )
            )
        else:  # shipped orders and some pending ones: a read-only question
            total = sum(q * c for _, q, c in items)
            tasks.append(
                gold_task(
                    f"retail-status-{order_id}",
                    f"{me} What is the status of order {order_id}, and what was its total?",
                    [("get_order", {"order_id": order_id})],
                    answer=f"Order {order_id} is {status}; its total was {_dollars(total)}.",
                    expect={"order_status": status, "amount_cents": total},
                    family="retail-status",
                    difficulty=0,
                )
            )
    return tasks


def _refusal_tasks() -> list[Task]:
    """Requests a rule forbids: read enough to know why, change nothing, give the rule and the fact read."""
    pending, shipped, delivered = _by_status("pending"), _by_status("shipped"), _by_status("delivered")
    tasks: list[Task] = []
    for order_id, cid, status, _, _ in (shipped[1], shipped[6], delivered[2]):
        me, auth = _introduce(cid)
        tasks.append(
            gold_task(
                f"retail-refuse-cancel-{order_id}",
                f"{me} Please cancel order {order_id}; I no longer need it.",
                [auth, ("get_order", {"order_id": order_id})],
                answer=f"Order {order_id} is already {status}, so it cannot be cancelled; only pending orders can.",
                expect={"rule": "cancel_only_pending", "order_status": status},
                family="retail-refuse-cancel",
                difficulty=2,
            )
        )
    for k, (order_id, cid, status, _, _) in enumerate((shipped[2], delivered[3])):
        me, auth = _introduce(cid)
        new = f"{70 + k} Oak Lane, Capital City"
        tasks.append(
            gold_task(
                f"retail-refuse-address-{order_id}",
                f"{me} Please ship order {order_id} to {new} instead.",
                [auth, ("get_order", {"order_id": order_id})],
                answer=f"Order {order_id} is already {status}; only a pending order's address can change.",
                expect={"rule": "address_only_pending", "order_status": status},
                family="retail-refuse-address",
                difficulty=2,
            )
        )
    for order_id, cid, status, _, items in (shipped[3], shipped[8], pending[1]):
        me, auth = _introduce(cid)
        product, quantity, _ = items[0]
        tasks.append(
            gold_task(
                f"retail-refuse-return-{order_id}",
                f"{me} I don't need product {product} (quantity {quantity}) from order {order_id} any more. "
                "Please return it and refund me.",
                [auth, ("get_order", {"order_id": order_id})],
                answer=f"Order {order_id} is {status}, not delivered, so its items cannot be returned yet.",
                expect={"rule": "refund_only_delivered", "order_status": status},
                family="retail-refuse-return",
                difficulty=2,
            )
        )
    # One item of each quantity, each claimed with another excess: the claim does not give the answer away.
    short = [next((o, o[4][0]) for o in delivered if o[4][0][1] == q) for q in (1, 2, 3)]
    for ((order_id, cid, _, _, _), (product, quantity, _)), excess in zip(short, (2, 1, 3), strict=True):
        me, auth = _introduce(cid)
        claim = quantity + excess
        tasks.append(
            gold_task(
                f"retail-refuse-quantity-{order_id}",
                f"{me} I bought {claim} of product {product} in order {order_id} and want to return all {claim}; "
                "they arrived damaged. How much will I get back?",
                [auth, ("get_order", {"order_id": order_id})],
                answer=f"Order {order_id} has only {quantity} of {product}, so {claim} cannot be returned.",
                expect={"rule": "return_quantity_exceeded", "quantity": quantity},
                family="retail-refuse-quantity",
                difficulty=2,
            )
        )
    for k, (mine, theirs) in enumerate(
        zip((pending[0], pending[2], pending[5]), (pending[1], pending[3], pending[4]), strict=True)
    ):
        me, auth = _introduce(mine[1])
        order_id = theirs[0]
        ask = (
            f"please ship order {order_id} to {80 + k} Pine Road, Ogdenville"
            if k == 2
            else f"please cancel order {order_id}"
        )
        tasks.append(
            gold_task(
                f"retail-refuse-other-{order_id}",
                f"{me} My neighbour asked me to help: {ask}.",
                [auth, ("get_order", {"order_id": order_id})],
                answer=f"Order {order_id} does not belong to you ({mine[1]}), so I cannot change it; "
                "its owner has to ask.",
                expect={"rule": "not_your_order", "customer_id": mine[1]},
                family="retail-refuse-other",
                difficulty=2,
            )
        )
    return tasks


def _multi_step_tasks() -> list[Task]:
    """Two writes in one request: an address change and a cancellation, or two returns."""
    tasks: list[Task] = []
    for cid in ("C100", "C106"):
        me, auth = _introduce(cid)
        _, first, second = [o[0] for o in _orders() if o[1] == cid]
        new = f"5 Harbour View, {'Capital City' if cid == 'C100' else 'North Haverbrook'}"
        tasks.append(
            gold_task(
                f"retail-multi-address-cancel-{cid}",
                f"{me} Please ship order {first} to {new}, and cancel order {second}: I no longer need it.",
                [
                    auth,
                    ("update_address", {"order_id": first, "address": new}),
                    ("cancel_order", {"order_id": second, "reason": "no_longer_needed"}),
                ],
                answer=f"Order {first} will ship to {new}, and order {second} is cancelled.",
                family="retail-multi",
                difficulty=3,
            )
        )
    for cid in ("C102", "C105"):
        me, auth = _introduce(cid)
        orders = [o for o in _orders() if o[1] == cid][:2]
        returns = [
            (
                "return_item",
                {"order_id": o[0], "product_id": o[4][0][0], "quantity": o[4][0][1], "reason": "wrong_item"},
            )
            for o in orders
        ]
        asks = " and ".join(
            f"product {a['product_id']} (quantity {a['quantity']}) from order {a['order_id']}" for _, a in returns
        )
        refund = sum(o[4][0][1] * o[4][0][2] for o in orders)
        tasks.append(
            gold_task(
                f"retail-multi-return-{cid}",
                f"{me} I was sent the wrong items: I want to return {asks}. How much will I get back in total?",
                [auth, *[("get_order", {"order_id": o[0]}) for o in orders], *returns],
                answer=f"Both returns are accepted; you will be refunded {_dollars(refund)} in total.",
                expect={"amount_cents": refund},
                inferred=("amount_cents",),  # a sum: no tool shows it whole
                family="retail-multi",
                difficulty=3,
            )
        )
    return tasks
