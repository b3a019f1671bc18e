"""Shop: an online store's data, tasks and checks (the web app is `_shop_app`).

Seed: the twelve products tasks name, the four past orders and the saved cart (Steel
Kettle x1, Pocket Speaker x2) are fixed; each category's eight other products (names,
prices from $14.99 up, stock) vary with the seed, and no filler name or description
holds a word a task searches for.

Tasks (14): lookups (a price, a stock level, a category's size or cheapest product, an
order's total, which order held a product, what the delivered orders cost) and writes
(add, remove or change a cart line; cancel an order; check out the cart; buy one
product and nothing else). A writing check wants exactly the intended change in the
shop's tables: the cart as asked and nothing else changed; one new order with exactly
these items at their prices, this address, shipping and card, stock taken for exactly
those items and the cart left empty, as checking out leaves it; a cancellation that
flips only the status and returns the stock. A lookup wants the shop as it was (a
right answer after emptying the cart or cancelling orders scores 0). An answer is one
value (dollars, a whole number, a name), never a list.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Mapping

from agentenv.envs.browser.apps._golden import answer, choose, click, fill, press
from agentenv.envs.browser.apps._shop_app import COUNTRIES, create_app, shipping_cents
from agentenv.envs.browser.apps._verify import (
    State,
    answer_cents,
    answer_int,
    answer_text,
    changes,
    keyed,
    normalise,
    read_only,
)
from agentenv.envs.browser.site import Site, SiteTask

__all__ = ["SITE"]

SCHEMA = """
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, slug TEXT NOT NULL UNIQUE);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                       category_id INTEGER NOT NULL REFERENCES categories(id),
                       price_cents INTEGER NOT NULL, stock INTEGER NOT NULL, description TEXT NOT NULL);
CREATE TABLE cart_items (product_id INTEGER PRIMARY KEY REFERENCES products(id),
                         quantity INTEGER NOT NULL CHECK (quantity > 0));
CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, placed_on TEXT NOT NULL, status TEXT NOT NULL,
                     full_name TEXT NOT NULL, street TEXT NOT NULL, city TEXT NOT NULL, postal_code TEXT NOT NULL,
                     country TEXT NOT NULL, shipping TEXT NOT NULL, shipping_cents INTEGER NOT NULL,
                     card_last4 TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id),
                          product_id INTEGER NOT NULL REFERENCES products(id),
                          quantity INTEGER NOT NULL, price_cents INTEGER NOT NULL,
                          PRIMARY KEY (order_id, product_id));
"""
CATEGORIES = [(1, "Kitchen", "kitchen"), (2, "Home office", "office"), (3, "Outdoor", "outdoor"), (4, "Audio", "audio")]
PRODUCTS = [  # (id, name, category, price in cents, stock, description): the products tasks name
    (1, "Copper Kettle", 1, 4250, 12, "A 1.7 litre stovetop kettle in polished copper with a whistling spout."),
    (2, "Steel Kettle", 1, 2999, 30, "An electric kettle in brushed steel that boils 1.5 litres in four minutes."),
    (3, "Santoku Knife", 1, 5900, 8, "A 17 cm santoku knife with a hollow-ground blade and an oak handle."),
    (4, "Pour-over Coffee Set", 1, 3400, 14, "A glass dripper, a carafe and 100 paper filters."),
    (5, "Aurora Desk Lamp", 2, 3450, 15, "An LED desk lamp with three colour temperatures and a USB charging port."),
    (6, "Walnut Monitor Stand", 2, 6900, 4, "A solid walnut riser that lifts a monitor by 10 cm."),
    (7, "Mesh Office Chair", 2, 18900, 2, "An ergonomic chair with a breathable mesh back and lumbar support."),
    (8, "Trail Backpack 30L", 3, 7900, 9, "A 30 litre hiking pack with a rain cover and a hydration sleeve."),
    (9, "Camping Mug", 3, 900, 40, "An enamel mug that goes from campfire to table."),
    (10, "Trekking Poles", 3, 4900, 0, "A pair of collapsible aluminium poles with cork grips."),
    (11, "Studio Headphones", 4, 12900, 6, "Closed-back headphones for mixing and long listening sessions."),
    (12, "Pocket Speaker", 4, 3900, 25, "A splash-proof Bluetooth speaker with twelve hours of play."),
]
FILLER_ADJECTIVES = ["Oak", "Slate", "Nordic", "Classic", "Compact", "Harbor", "Summit", "Meadow", "Coastal", "Urban"]
FILLER_NOUNS = {
    1: ["Cutting Board", "Salad Bowl", "Spice Rack", "Bread Bin", "Pasta Pot", "Tea Towel Set", "Colander",
        "Utensil Jar", "Serving Tray", "Pepper Mill"],
    2: ["Notebook", "Pen Holder", "Desk Mat", "Letter Tray", "Wall Clock", "Bookend Pair", "Cable Box",
        "Whiteboard", "Footrest", "Drawer Unit"],
    3: ["Hammock", "Tent Footprint", "Head Torch", "Dry Bag", "Picnic Blanket", "Camp Stool", "Water Filter",
        "Map Case", "Rain Poncho", "Compass"],
    4: ["Turntable", "Radio", "Soundbar", "Earbuds", "Microphone", "Amplifier", "Cable Kit", "Record Cleaner",
        "Mixer", "Cassette Deck"],
}  # fmt: skip
FILLERS_PER_CATEGORY = 8
CART = [(2, 1), (12, 2)]
HOME = ("Sam Rivera", "18 Harbor Street", "Portland", "97201", "US")
ORDERS = [  # (id, placed on, status, shipping, [(product, quantity)]): prices are the products' own
    (1001, "2025-05-02", "delivered", "standard", [(11, 1), (9, 2)]),
    (1002, "2025-05-28", "shipped", "express", [(3, 1), (4, 1)]),
    (1003, "2025-06-12", "processing", "standard", [(5, 2), (9, 1)]),
    (1004, "2025-04-10", "delivered", "standard", [(12, 1)]),
]
SEED_ORDERS = frozenset(o[0] for o in ORDERS)


def seed(db: sqlite3.Connection, seed: int) -> None:
    rng = random.Random(seed)
    db.executemany("INSERT INTO categories (id, name, slug) VALUES (?, ?, ?)", CATEGORIES)
    db.executemany(
        "INSERT INTO products (id, name, category_id, price_cents, stock, description) VALUES (?, ?, ?, ?, ?, ?)",
        PRODUCTS,
    )
    next_id = len(PRODUCTS) + 1
    for category_id, name, _ in CATEGORIES:
        for noun in rng.sample(FILLER_NOUNS[category_id], FILLERS_PER_CATEGORY):
            adjective = rng.choice(FILLER_ADJECTIVES)
            db.execute(
                "INSERT INTO products (id, name, category_id, price_cents, stock, description) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    next_id,
                    f"{adjective} {noun}",
                    category_id,
                    rng.randint(15, 150) * 100 - 1,
                    rng.randint(1, 40),
                    f"{adjective} {noun.lower()} from our {name.lower()} range.",
                ),
            )
            next_id += 1
    db.executemany("INSERT INTO cart_items (product_id, quantity) VALUES (?, ?)", CART)
    prices = {p[0]: p[3] for p in PRODUCTS}
    for order_id, placed, status, shipping, items in ORDERS:
        subtotal = sum(prices[p] * q for p, q in items)
        db.execute(
            "INSERT INTO orders (id, placed_on, status, full_name, street, city, postal_code, country, shipping, "
            "shipping_cents, card_last4) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (order_id, placed, status, *HOME, shipping, shipping_cents(shipping, subtotal), "4242"),
        )
        db.executemany(
            "INSERT INTO order_items (order_id, product_id, quantity, price_cents) VALUES (?, ?, ?, ?)",
            [(order_id, p, q, prices[p]) for p, q in items],
        )


# -- checks ---------------------------------------------------------------------------


def _state(db: sqlite3.Connection) -> State:
    """Every table and column: the frame of every task."""
    return {
        "categories": keyed(db.execute("SELECT id, name, slug FROM categories")),
        "products": keyed(db.execute("SELECT id, name, category_id, price_cents, stock, description FROM products")),
        "cart_items": keyed(db.execute("SELECT product_id, quantity FROM cart_items")),
        "orders": keyed(
            db.execute(
                "SELECT id, placed_on, status, full_name, street, city, postal_code, country, shipping, "
                "shipping_cents, card_last4 FROM orders"
            )
        ),
        "order_items": keyed(
            db.execute("SELECT order_id, product_id, quantity, price_cents FROM order_items"), width=2
        ),
    }


def _product_ids(db: sqlite3.Connection, names: Mapping[str, int] | list[str]) -> dict[int, str]:
    """Product id -> name for each name; an unknown name is an authoring error."""
    out = {}
    for name in names:
        row = db.execute("SELECT id FROM products WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise ValueError(f"no product named {name!r} in the shop")
        out[row[0]] = name
    return out


def _cart_by_name(db: sqlite3.Connection) -> dict[str, int]:
    rows = db.execute("SELECT p.name, c.quantity FROM cart_items c JOIN products p ON p.id = c.product_id")
    return dict(rows.fetchall())


def check_cart_is(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, cart: dict) -> float:
    """The cart holds exactly ``cart`` (name -> quantity), and nothing else in the shop changed."""
    _product_ids(start, list(cart))
    changed = changes(_state(start), _state(db))
    return float(set(changed) <= {"cart_items"} and _cart_by_name(db) == cart)


def check_order_placed(
    db: sqlite3.Connection,
    start: sqlite3.Connection,
    answer: str | None,
    *,
    items: dict,
    address: dict,
    shipping: str,
    card_last4: str,
) -> float:
    """Exactly one new order: these items at their prices, this address, shipping and card; stock taken
    for exactly these items; no other order, order line or product changed; the cart empty, as placing
    the order leaves it (what was in it before may differ: the order says what was bought)."""
    ids = _product_ids(start, list(items))
    before, after = _state(start), _state(db)
    changed = changes(before, after)
    orders_ch, lines_ch, products_ch = (changed.get(t) for t in ("orders", "order_items", "products"))
    if not (set(changed) <= {"orders", "order_items", "products", "cart_items"} and orders_ch and lines_ch):
        return 0.0
    if after["cart_items"]:
        return 0.0
    if orders_ch.removed or orders_ch.changed or len(orders_ch.added) != 1 or lines_ch.removed or lines_ch.changed:
        return 0.0
    ((order_id, row),) = orders_ch.added.items()
    _, _, status, name, street, city, postal, country, ship, _, last4 = row
    given = {"full_name": name, "street": street, "city": city, "postal_code": postal, "country": country}
    if status != "processing" or ship != shipping or last4 != card_last4:
        return 0.0
    if {k: normalise(str(v)) for k, v in given.items()} != {k: normalise(str(v)) for k, v in address.items()}:
        return 0.0
    prices = {pid: before["products"][pid][3] for pid in ids}
    want_lines = {(order_id, pid): (order_id, pid, items[name], prices[pid]) for pid, name in ids.items()}
    if lines_ch.added != want_lines:
        return 0.0
    stock_taken = {
        pid: (old[4] - new[4], old[:4] + old[5:] == new[:4] + new[5:])
        for pid, (old, new) in (products_ch.changed.items() if products_ch else ())
    }
    want_stock = {pid: (items[name], True) for pid, name in ids.items()}
    return float(stock_taken == want_stock and not (products_ch and (products_ch.added or products_ch.removed)))


def check_order_cancelled(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, order: int
) -> float:
    """The order went from processing to cancelled, its items went back to stock, nothing else changed."""
    before, after = _state(start), _state(db)
    if order not in before["orders"]:
        raise ValueError(f"no order {order} in the shop")
    changed = changes(before, after)
    if set(changed) != {"orders", "products"}:
        return 0.0
    old, new = changed["orders"].changed.get(order, ((), ()))
    if set(changed["orders"].changed) != {order} or changed["orders"].added or changed["orders"].removed:
        return 0.0
    if not (old[2] == "processing" and new[2] == "cancelled" and old[:2] + old[3:] == new[:2] + new[3:]):
        return 0.0
    back = {row[1]: row[2] for row in before["order_items"].values() if row[0] == order}
    products = changed["products"]
    restored = {pid: new[4] - old[4] for pid, (old, new) in products.changed.items() if old[:4] == new[:4]}
    return float(restored == back and len(restored) == len(products.changed) and not products.added)


@read_only(_state)
def check_price(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, product: str) -> float:
    """The answer is the product's price in dollars."""
    (pid,) = _product_ids(start, [product])
    return float(
        answer_cents(answer) == start.execute("SELECT price_cents FROM products WHERE id = ?", (pid,)).fetchone()[0]
    )


@read_only(_state)
def check_stock(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, product: str) -> float:
    """The answer is how many of the product were in stock."""
    (pid,) = _product_ids(start, [product])
    return float(answer_int(answer) == start.execute("SELECT stock FROM products WHERE id = ?", (pid,)).fetchone()[0])


@read_only(_state)
def check_category_count(
    db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, category: str
) -> float:
    """The answer is the number of products in the category."""
    row = start.execute(
        "SELECT count(p.id) FROM categories c LEFT JOIN products p ON p.category_id = c.id WHERE c.name = ?",
        (category,),
    ).fetchone()
    return float(answer_int(answer) == row[0])


@read_only(_state)
def check_cheapest(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, category: str) -> float:
    """The answer is the name of the category's one cheapest product."""
    rows = start.execute(
        "SELECT p.name FROM products p JOIN categories c ON c.id = p.category_id WHERE c.name = ? "
        "AND p.price_cents = (SELECT min(price_cents) FROM products WHERE category_id = c.id)",
        (category,),
    ).fetchall()
    if len(rows) != 1:
        raise ValueError(f"category {category!r} has no single cheapest product: {rows}")
    return float(answer_text(answer) == normalise(rows[0][0]))


@read_only(_state)
def check_order_total(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, order: int) -> float:
    """The answer is the order's total, shipping included, in dollars."""
    row = start.execute(
        "SELECT o.shipping_cents + sum(i.quantity * i.price_cents) FROM orders o "
        "JOIN order_items i ON i.order_id = o.id WHERE o.id = ? GROUP BY o.id",
        (order,),
    ).fetchone()
    if row is None:
        raise ValueError(f"no order {order} in the shop")
    return float(answer_cents(answer) == row[0])


@read_only(_state)
def check_order_with(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None, *, product: str) -> float:
    """The answer is the number of the one order that holds the product (``1002`` or ``#1002``)."""
    (pid,) = _product_ids(start, [product])
    rows = start.execute("SELECT order_id FROM order_items WHERE product_id = ?", (pid,)).fetchall()
    if len(rows) != 1:
        raise ValueError(f"{product!r} is in {len(rows)} orders, not one")
    text = answer_text(answer)
    return float(text is not None and answer_int(text.removeprefix("#")) == rows[0][0])


@read_only(_state)
def check_delivered_spend(db: sqlite3.Connection, start: sqlite3.Connection, answer: str | None) -> float:
    """The answer is the sum of the totals of the delivered orders, in dollars."""
    row = start.execute(
        "SELECT coalesce(sum(t), 0) FROM (SELECT o.shipping_cents + sum(i.quantity * i.price_cents) AS t "
        "FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.status = 'delivered' GROUP BY o.id)"
    ).fetchone()
    return float(answer_cents(answer) == row[0])


def holds_cart(db: sqlite3.Connection, *, cart: dict) -> bool:
    """The cart holds exactly ``cart`` (name -> quantity)."""
    return _cart_by_name(db) == cart


def has_new_order(db: sqlite3.Connection, *, items: dict) -> bool:
    """An order placed in the episode holds exactly ``items`` (name -> quantity)."""
    rows = db.execute(
        "SELECT i.order_id, p.name, i.quantity FROM order_items i JOIN products p ON p.id = i.product_id"
    ).fetchall()
    placed: dict[int, dict[str, int]] = {}
    for order_id, name, quantity in rows:
        if order_id not in SEED_ORDERS:
            placed.setdefault(order_id, {})[name] = quantity
    return items in placed.values()


# -- tasks ----------------------------------------------------------------------------

ADA = {"full_name": "Ada Moreau", "street": "12 Elm Road", "city": "Springfield", "postal_code": "62704",
       "country": "US"}  # fmt: skip
LENA = {"full_name": "Lena Novak", "street": "Hauptstrasse 5", "city": "Berlin", "postal_code": "10115",
        "country": "DE"}  # fmt: skip


def _checkout_steps(address: Mapping[str, str], shipping: str, card: str, expiry: str, cvc: str) -> list:
    return [
        click("link", "Proceed to checkout"),
        fill("textbox", "Full name", address["full_name"]),
        fill("textbox", "Street address", address["street"]),
        fill("textbox", "City", address["city"]),
        fill("textbox", "Postal code", address["postal_code"]),
        choose("Country", COUNTRIES[address["country"]]),
        click("radio", f"{shipping.capitalize()} shipping"),
        fill("textbox", "Card number", card),
        fill("textbox", "Expiry date", expiry),
        fill("textbox", "Security code", cvc),
        click("button", "Place order"),
    ]


TASKS = [
    SiteTask(
        id="price-lamp",
        prompt="How much does the Aurora Desk Lamp cost? Answer with the price in dollars, like 12.34.",
        golden=[click("link", "Aurora Desk Lamp"), answer("34.50")],
        check="price",
        check_args={"product": "Aurora Desk Lamp"},
        difficulty=0,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="add-lamp",
        prompt="Add one Aurora Desk Lamp to my cart.",
        golden=[click("button", "Add to cart")],
        check="cart_is",
        check_args={"cart": {"Steel Kettle": 1, "Pocket Speaker": 2, "Aurora Desk Lamp": 1}},
        start="/product/5",
        difficulty=0,
        family="cart",
    ),
    SiteTask(
        id="remove-speaker",
        prompt="Take the Pocket Speaker out of my cart; keep everything else.",
        golden=[click("button", "Remove Pocket Speaker")],
        check="cart_is",
        check_args={"cart": {"Steel Kettle": 1}},
        start="/cart",
        difficulty=0,
        family="cart",
    ),
    SiteTask(
        id="count-kitchen",
        prompt="How many products does the shop have in its Kitchen category? Answer with a number.",
        golden=[click("link", "Kitchen"), answer("12")],
        check="category_count",
        check_args={"category": "Kitchen"},
        difficulty=1,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="kettle-quantity",
        prompt="I want 3 Steel Kettles instead of 1: change the quantity in my cart.",
        golden=[fill("spinbutton", "Quantity of Steel Kettle", "3"), click("button", "Update Steel Kettle")],
        check="cart_is",
        check_args={"cart": {"Steel Kettle": 3, "Pocket Speaker": 2}},
        start="/cart",
        difficulty=1,
        family="cart",
    ),
    SiteTask(
        id="search-add-copper",
        prompt="Search the shop for kettles and add two of the copper one to my cart.",
        golden=[
            fill("searchbox", "Search products", "kettle"),
            press("Enter"),
            click("link", "Copper Kettle"),
            fill("spinbutton", "Quantity", "2"),
            click("button", "Add to cart"),
        ],
        check="cart_is",
        check_args={"cart": {"Steel Kettle": 1, "Pocket Speaker": 2, "Copper Kettle": 2}},
        difficulty=2,
        family="cart",
    ),
    SiteTask(
        id="cheapest-outdoor",
        prompt="Which is the cheapest product in the Outdoor category? Answer with its name.",
        golden=[
            click("link", "Outdoor"),
            choose("Sort by", "Price: low to high"),
            click("button", "Sort"),
            answer("Camping Mug"),
        ],
        check="cheapest",
        check_args={"category": "Outdoor"},
        difficulty=2,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="stock-monitor-stand",
        prompt="How many Walnut Monitor Stands are left in stock? Answer with a number.",
        golden=[
            fill("searchbox", "Search products", "monitor"),
            click("button", "Search"),
            click("link", "Walnut Monitor Stand"),
            answer("4"),
        ],
        check="stock",
        check_args={"product": "Walnut Monitor Stand"},
        difficulty=2,
        family="lookup",
        writes=False,
    ),
    SiteTask(
        id="order-total",
        prompt="What was the total of my order #1002, shipping included? Answer in dollars, like 12.34.",
        golden=[click("link", "Orders"), click("link", "Order #1002"), answer("107.99")],
        check="order_total",
        check_args={"order": 1002},
        difficulty=2,
        family="orders",
        writes=False,
    ),
    SiteTask(
        id="which-order-knife",
        prompt="In which of my orders did I buy the Santoku Knife? Answer with the order number, like 1234.",
        golden=[click("link", "Orders"), click("link", "Order #1002"), answer("1002")],
        check="order_with",
        check_args={"product": "Santoku Knife"},
        difficulty=2,
        family="orders",
        writes=False,
    ),
    SiteTask(
        id="cancel-order",
        prompt="Please cancel my order #1003.",
        golden=[
            click("link", "Orders"),
            click("link", "Order #1003"),
            click("link", "Cancel order"),
            click("button", "Yes, cancel order"),
        ],
        check="order_cancelled",
        check_args={"order": 1003},
        difficulty=2,
        family="orders",
    ),
    SiteTask(
        id="delivered-spend",
        prompt="How much have I spent in total on my orders that were delivered, shipping included? "
        "Answer in dollars, like 12.34.",
        golden=[
            click("link", "Orders"),
            click("link", "Order #1001"),
            click("link", "Orders"),
            click("link", "Order #1004"),
            answer("190.99"),
        ],
        check="delivered_spend",
        difficulty=3,
        family="orders",
        writes=False,
    ),
    SiteTask(
        id="checkout-cart",
        prompt="Check out my cart as it is. Ship it to Ada Moreau, 12 Elm Road, Springfield, 62704, United States, "
        "with standard shipping, and pay with card 4242 4242 4242 4242, expiry 12/27, security code 123.",
        golden=[click("link", "Cart"), *_checkout_steps(ADA, "standard", "4242 4242 4242 4242", "12/27", "123")],
        check="order_placed",
        check_args={
            "items": {"Steel Kettle": 1, "Pocket Speaker": 2},
            "address": ADA,
            "shipping": "standard",
            "card_last4": "4242",
        },
        difficulty=3,
        family="checkout",
        subgoals=[("new_order", {"items": {"Steel Kettle": 1, "Pocket Speaker": 2}})],
    ),
    SiteTask(
        id="buy-backpack-only",
        prompt="Buy one Trail Backpack 30L and nothing else: what is in my cart now should not be ordered. "
        "Send it by express shipping to Lena Novak, Hauptstrasse 5, Berlin, 10115, Germany, and pay with card "
        "5555 5555 5555 4444, expiry 03/28, security code 737.",
        golden=[
            fill("searchbox", "Search products", "backpack"),
            press("Enter"),
            click("link", "Trail Backpack 30L"),
            click("button", "Add to cart"),
            press("Escape"),
            click("link", "Cart"),
            click("button", "Remove Steel Kettle"),
            click("button", "Remove Pocket Speaker"),
            *_checkout_steps(LENA, "express", "5555 5555 5555 4444", "03/28", "737"),
        ],
        check="order_placed",
        check_args={"items": {"Trail Backpack 30L": 1}, "address": LENA, "shipping": "express", "card_last4": "4444"},
        difficulty=3,
        family="checkout",
        subgoals=[
            ("cart_holds", {"cart": {"Trail Backpack 30L": 1}}),
            ("new_order", {"items": {"Trail Backpack 30L": 1}}),
        ],
    ),
]

SITE = Site(
    name="shop",
    schema=SCHEMA,
    seed=seed,
    create_app=create_app,
    checks={
        "cart_is": check_cart_is,
        "order_placed": check_order_placed,
        "order_cancelled": check_order_cancelled,
        "price": check_price,
        "stock": check_stock,
        "category_count": check_category_count,
        "cheapest": check_cheapest,
        "order_total": check_order_total,
        "order_with": check_order_with,
        "delivered_spend": check_delivered_spend,
    },
    tasks=TASKS,
    state=_state,
    subgoals={"cart_holds": holds_cart, "new_order": has_new_order},
)
