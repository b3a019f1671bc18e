"""The shop's web app: an online store with search, categories, product pages, a cart,
a checkout with address and payment validation, and the customer's orders.

Pages: ``/`` (categories, featured products), ``/category/{slug}`` and ``/search?q=``
(sortable, 10 a page), ``/product/{id}`` (add to cart; an "Added to your cart" modal
follows), ``/cart`` (change quantities, remove), ``/checkout`` (the form), ``/orders``
and ``/orders/{id}`` (cancel a processing order, confirmed in a modal).

Rules the app enforces: a cart line holds 1 to 10 and never more than the stock;
checkout needs a postal code of the country's format, a 16-digit card number that
passes the Luhn check, an expiry not before the shop's date (`TODAY`, fixed so
episodes replay) and a 3-digit security code; standard shipping is free from $50.00
of goods, else $4.99; express is $14.99; placing an order takes its items from stock,
cancelling (only while processing) puts them back. Prices are integer cents.

The site around it (schema, seed, checks, tasks) is `agentenv.envs.browser.apps.shop`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import Field, field_validator
from starlette.responses import Response

from agentenv.envs.browser.apps._chrome import Chrome, NavItem, button_form, confirm_dialog, dialog, post_form
from agentenv.envs.browser.apps._html import Html, error_summary, html, number_input, pager, radios, select, text_input
from agentenv.envs.browser.apps._web import Endpoint, Form, HttpError, Req, build_app, see_other, validate

__all__ = ["COUNTRIES", "TODAY", "create_app", "shipping_cents"]

TITLE = "Hearth & Trail"
TODAY = date(2025, 6, 16)
PER_PAGE = 10
MAX_LINE = 10
FREE_SHIPPING_FROM = 5000
SHIPPING = {"standard": 499, "express": 1499}
COUNTRIES = {"US": "United States", "CA": "Canada", "GB": "United Kingdom", "DE": "Germany"}
SORTS = {"name": "Name: A to Z", "price_asc": "Price: low to high", "price_desc": "Price: high to low"}
FEATURED = (5, 1, 8, 11)


def shipping_cents(shipping: str, subtotal: int) -> int:
    if shipping == "standard" and subtotal >= FREE_SHIPPING_FROM:
        return 0
    return SHIPPING[shipping]


def _money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


# -- pages ----------------------------------------------------------------------------


def _nav(db: sqlite3.Connection | None) -> list[NavItem]:
    count = db.execute("SELECT coalesce(sum(quantity), 0) FROM cart_items").fetchone()[0] if db else None
    return [
        NavItem("Home", "/"),
        NavItem("Cart", "/cart", None if count is None else f"({count} {'item' if count == 1 else 'items'})"),
        NavItem("Orders", "/orders"),
    ]


CHROME = Chrome(TITLE, _nav, search="Search products")


def home(db: sqlite3.Connection, req: Req) -> Response:
    categories = db.execute("SELECT name, slug FROM categories ORDER BY id").fetchall()
    featured = [_product(db, product_id) for product_id in FEATURED]
    main = html(
        '<section aria-labelledby="cats"><h2 id="cats">Shop by category</h2><ul>{cats}</ul></section>'
        '<section aria-labelledby="feat"><h2 id="feat">Featured</h2><ul>{feat}</ul></section>',
        cats=[html('<li><a href="/category/{s}">{n}</a></li>', s=slug, n=name) for name, slug in categories],
        feat=[
            html('<li><a href="/product/{i}">{n}</a> {p}</li>', i=p.id, n=p.name, p=_money(p.price_cents))
            for p in featured
        ],
    )
    return CHROME.page(db, "Welcome to Hearth & Trail", main, current="/")


def category(db: sqlite3.Connection, req: Req) -> Response:
    row = db.execute("SELECT id, name FROM categories WHERE slug = ?", (req.params["slug"],)).fetchone()
    if row is None:
        raise HttpError(404, "There is no such category.")
    return _listing(db, req, title=row[1], category_id=row[0], query="", path=f"/category/{req.params['slug']}")


def search(db: sqlite3.Connection, req: Req) -> Response:
    query = req.query_text("q", max_length=100)
    title = f"Search results for \u201c{query}\u201d" if query else "All products"
    return _listing(db, req, title=title, category_id=None, query=query, path="/search")


def _listing(
    db: sqlite3.Connection, req: Req, *, title: str, category_id: int | None, query: str, path: str
) -> Response:
    sort = req.query.get("sort", "name")
    if sort not in SORTS:
        raise HttpError(400, f"Sort by one of: {', '.join(SORTS.values())}.")
    pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = {"cat": category_id, "q": query, "pat": pattern, "sort": sort}
    total = db.execute(
        "SELECT count(*) FROM products WHERE (:cat IS NULL OR category_id = :cat) "
        "AND (:q = '' OR name LIKE :pat ESCAPE '\\' OR description LIKE :pat ESCAPE '\\')",
        where,
    ).fetchone()[0]
    pages = max(1, -(-total // PER_PAGE))
    page_no = min(req.query_int("page", default=1, lo=1, hi=10_000), pages)
    rows = db.execute(
        "SELECT id, name, price_cents, stock FROM products WHERE (:cat IS NULL OR category_id = :cat) "
        "AND (:q = '' OR name LIKE :pat ESCAPE '\\' OR description LIKE :pat ESCAPE '\\') "
        "ORDER BY CASE WHEN :sort = 'price_asc' THEN price_cents END ASC, "
        "CASE WHEN :sort = 'price_desc' THEN price_cents END DESC, name, id LIMIT :limit OFFSET :offset",
        {**where, "limit": PER_PAGE, "offset": (page_no - 1) * PER_PAGE},
    ).fetchall()
    extra = {"q": query} if path == "/search" else {}
    sort_form = html(
        '<form method="get" action="{path}">{hidden}{sel}<button type="submit">Sort</button></form>',
        path=path,
        hidden=html('<input type="hidden" name="q" value="{q}">', q=query) if path == "/search" else Html(""),
        sel=select("sort", "Sort by", list(SORTS.items()), sort),
    )
    table = html(
        "<table><caption>{caption}</caption><thead><tr><th>Product</th><th>Price</th><th>Availability</th></tr>"
        "</thead><tbody>{rows}</tbody></table>",
        caption=f"{total} {'product' if total == 1 else 'products'}",
        rows=[
            html(
                '<tr><td><a href="/product/{i}">{n}</a></td><td>{p}</td><td>{a}</td></tr>',
                i=i,
                n=n,
                p=_money(c),
                a="In stock" if s > 0 else "Out of stock",
            )
            for i, n, c, s in rows
        ],
    )
    empty = html("<p>No products match your search.</p>") if total == 0 else Html("")
    main = html(
        "{sort}{table}{empty}{pager}",
        sort=sort_form,
        table=table,
        empty=empty,
        pager=pager(page_no, pages, path, {**extra, "sort": sort}),
    )
    return CHROME.page(db, title, main, query=query)


class Product(NamedTuple):
    id: int
    name: str
    price_cents: int
    stock: int
    description: str
    category: str
    slug: str


def _product(db: sqlite3.Connection, product_id: int) -> Product:
    row = db.execute(
        "SELECT p.id, p.name, p.price_cents, p.stock, p.description, c.name, c.slug "
        "FROM products p JOIN categories c ON c.id = p.category_id WHERE p.id = ?",
        (product_id,),
    ).fetchone()
    if row is None:
        raise HttpError(404, "There is no such product.")
    return Product(*row)


def product(db: sqlite3.Connection, req: Req) -> Response:
    return _product_page(db, req.params["id"], added=req.query.get("added") == "1")


def _product_page(
    db: sqlite3.Connection, product_id: int, *, added: bool = False, quantity: str = "1", error: str | None = None
) -> Response:
    p = _product(db, product_id)
    stock = f"In stock ({p.stock} left)" if p.stock > 0 else "Out of stock"
    main = html(
        '<nav aria-label="Breadcrumb"><a href="/category/{slug}">{cat}</a></nav>'
        '<p class="price">{price}</p><p>{stock}</p><p>{desc}</p>{add}',
        slug=p.slug,
        cat=p.category,
        price=_money(p.price_cents),
        stock=stock,
        desc=p.description,
        add=button_form(
            "/cart/add",
            "Add to cart",
            hidden={"product_id": p.id},
            body=html(
                "{err}{qty}",
                err=error_summary({"quantity": error} if error else {}),
                qty=number_input("quantity", "Quantity", quantity, lo=1, hi=MAX_LINE, error=error),
            ),
            disabled=p.stock <= 0,
        ),
    )
    modal = None
    if added:
        in_cart = db.execute("SELECT quantity FROM cart_items WHERE product_id = ?", (product_id,)).fetchone()
        modal = dialog(
            "added",
            "Added to your cart",
            html(
                "<p>Your cart now holds {q} \u00d7 {n}.</p>"
                '<p><a href="/cart">View cart</a></p>'
                '<form method="dialog"><button type="submit">Continue shopping</button></form>',
                q=in_cart[0] if in_cart else 0,
                n=p.name,
            ),
        )
    return CHROME.page(db, p.name, main, modal=modal, status=422 if error else 200)


class QuantityForm(Form):
    product_id: Annotated[int, Field(ge=1, le=10**9, title="Product")]
    quantity: Annotated[int, Field(ge=1, le=MAX_LINE, title="Quantity")]


def add_to_cart(db: sqlite3.Connection, req: Req) -> Response:
    form = validate(QuantityForm, req.form)
    if isinstance(form, dict):
        if "product_id" in form:
            raise HttpError(400, "The form does not name a product.")
        product_id = _form_product(req)
        return _product_page(db, product_id, quantity=req.form.get("quantity", "")[:20], error=form["quantity"])
    p = _product(db, form.product_id)
    row = db.execute("SELECT quantity FROM cart_items WHERE product_id = ?", (form.product_id,)).fetchone()
    total = (row[0] if row else 0) + form.quantity
    error = _line_error(p.name, total, p.stock)
    if error:
        return _product_page(db, form.product_id, quantity=str(form.quantity), error=error)
    db.execute(
        "INSERT INTO cart_items (product_id, quantity) VALUES (?, ?) "
        "ON CONFLICT (product_id) DO UPDATE SET quantity = excluded.quantity",
        (form.product_id, total),
    )
    return see_other(f"/product/{form.product_id}?added=1")


def _form_product(req: Req) -> int:
    raw = req.form.get("product_id", "")
    if not (raw.isascii() and raw.isdecimal() and len(raw) <= 9):
        raise HttpError(400, "The form does not name a product.")
    return int(raw)


def _line_error(name: str, quantity: int, stock: int) -> str | None:
    if stock <= 0:
        return f"{name} is out of stock."
    if quantity > stock:
        return f"Only {stock} of {name} left in stock; your cart cannot hold {quantity}."
    if quantity > MAX_LINE:
        return f"Quantity must be at most {MAX_LINE} per product; your cart would hold {quantity}."
    return None


def _cart(db: sqlite3.Connection) -> list[tuple[int, str, int, int, int]]:
    """(product id, name, unit price, quantity, stock) of each cart line."""
    return db.execute(
        "SELECT p.id, p.name, p.price_cents, c.quantity, p.stock FROM cart_items c "
        "JOIN products p ON p.id = c.product_id ORDER BY p.name"
    ).fetchall()


def cart(db: sqlite3.Connection, req: Req) -> Response:
    return _cart_page(db, {})


def _cart_page(db: sqlite3.Connection, errors: Mapping[int, str], *, notice: str | None = None) -> Response:
    lines = _cart(db)
    if not lines:
        return CHROME.page(db, "Your cart", html('<p>Your cart is empty.</p><p><a href="/">Continue shopping</a></p>'))
    rows = [
        html(
            '<tr><td><a href="/product/{i}">{n}</a></td><td>{price}</td><td>{update}</td>'
            "<td>{line}</td><td>{remove}</td></tr>",
            i=i,
            n=n,
            price=_money(c),
            update=button_form(
                "/cart/update",
                "Update",
                hidden={"product_id": i},
                body=number_input(
                    "quantity",
                    f"Quantity of {n}",
                    str(q),
                    lo=1,
                    hi=MAX_LINE,
                    key=f"qty-{i}",
                    label_hidden=True,
                    error=errors.get(i),
                ),
                name=f"Update {n}",
            ),
            line=_money(c * q),
            remove=button_form("/cart/remove", "Remove", hidden={"product_id": i}, name=f"Remove {n}"),
        )
        for i, n, c, q, _ in lines
    ]
    subtotal = sum(c * q for _, _, c, q, _ in lines)
    main = html(
        "{errs}<table><thead><tr><th>Product</th><th>Price</th><th>Quantity</th><th>Total</th><th>"
        '<span class="visually-hidden">Actions</span></th></tr></thead><tbody>{rows}</tbody></table>'
        "<p>Subtotal: <strong>{sub}</strong></p><p>{ship}</p>"
        '<p><a href="/checkout">Proceed to checkout</a></p>',
        errs=error_summary({str(k): v for k, v in errors.items()}),
        rows=rows,
        sub=_money(subtotal),
        ship=f"Standard shipping is free from {_money(FREE_SHIPPING_FROM)}, otherwise "
        f"{_money(SHIPPING['standard'])}; express shipping is {_money(SHIPPING['express'])}.",
    )
    return CHROME.page(db, "Your cart", main, current="/cart", notice=notice, status=422 if errors else 200)


def update_cart(db: sqlite3.Connection, req: Req) -> Response:
    product_id = _form_product(req)
    p = _product(db, product_id)
    if db.execute("SELECT 1 FROM cart_items WHERE product_id = ?", (product_id,)).fetchone() is None:
        raise HttpError(404, f"{p.name} is not in your cart.")
    form = validate(QuantityForm, req.form)
    error = form.get("quantity") if isinstance(form, dict) else _line_error(p.name, form.quantity, p.stock)
    if error or isinstance(form, dict):
        return _cart_page(db, {product_id: error or "Quantity is not valid."})
    db.execute("UPDATE cart_items SET quantity = ? WHERE product_id = ?", (form.quantity, product_id))
    return see_other("/cart")


def remove_from_cart(db: sqlite3.Connection, req: Req) -> Response:
    product_id = _form_product(req)
    db.execute("DELETE FROM cart_items WHERE product_id = ?", (product_id,))
    return see_other("/cart")


class CheckoutForm(Form):
    full_name: Annotated[str, Field(min_length=2, max_length=80, title="Full name")]
    street: Annotated[str, Field(min_length=3, max_length=120, title="Street address")]
    city: Annotated[str, Field(min_length=2, max_length=80, title="City")]
    postal_code: Annotated[str, Field(min_length=1, max_length=12, title="Postal code")]
    country: Annotated[Literal["US", "CA", "GB", "DE"], Field(title="Country")]
    shipping: Annotated[Literal["standard", "express"], Field(title="Shipping")]
    card_number: Annotated[str, Field(min_length=1, max_length=40, title="Card number")]
    expiry: Annotated[str, Field(min_length=1, max_length=10, title="Expiry date")]
    cvc: Annotated[str, Field(min_length=1, max_length=10, title="Security code")]

    @field_validator("card_number")
    @classmethod
    def _card(cls, value: str) -> str:
        digits = value.replace(" ", "").replace("-", "")
        if not (digits.isascii() and digits.isdecimal() and len(digits) == 16):
            raise ValueError("must be 16 digits")
        if not _luhn_ok(digits):
            raise ValueError("is not a valid card number: check the digits")
        return digits

    @field_validator("expiry")
    @classmethod
    def _expiry(cls, value: str) -> str:
        month, _, year = value.partition("/")
        if not (len(month) == 2 and len(year) == 2 and (month + year).isascii() and (month + year).isdecimal()):
            raise ValueError("must be written MM/YY, like 04/27")
        if not 1 <= int(month) <= 12:
            raise ValueError("must have a month from 01 to 12")
        if (2000 + int(year), int(month)) < (TODAY.year, TODAY.month):
            raise ValueError("has passed: this card has expired")
        return value

    @field_validator("cvc")
    @classmethod
    def _cvc(cls, value: str) -> str:
        if not (len(value) == 3 and value.isascii() and value.isdecimal()):
            raise ValueError("must be the 3 digits on the back of the card")
        return value


POSTAL_FORMATS = {  # country -> (check, what to tell the customer)
    "US": (lambda c: len(c) == 5 and c.isdecimal(), "5 digits"),
    "DE": (lambda c: len(c) == 5 and c.isdecimal(), "5 digits"),
    "CA": (lambda c: len(c) == 6 and c[0::2].isalpha() and c[1::2].isdecimal(), "like K1A 0B1"),
    "GB": (lambda c: 5 <= len(c) <= 7 and c[-3].isdecimal() and c[-2:].isalpha() and c[0].isalpha(), "like SW1A 1AA"),
}


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


def _postal_error(country: str, code: str) -> str | None:
    ok, what = POSTAL_FORMATS[country]
    compact = code.replace(" ", "").upper()
    if compact.isascii() and compact.isalnum() and ok(compact):
        return None
    where = COUNTRIES[country]
    return f"Postal code must be {what} for {'the ' if country in ('US', 'GB') else ''}{where}."


def checkout(db: sqlite3.Connection, req: Req) -> Response:
    if not _cart(db):
        return see_other("/cart")
    return _checkout_page(db, {}, {})


def _checkout_page(db: sqlite3.Connection, values: Mapping[str, str], errors: Mapping[str, str]) -> Response:
    lines = _cart(db)
    subtotal = sum(c * q for _, _, c, q, _ in lines)
    summary = html(
        '<section aria-labelledby="sum"><h2 id="sum">Order summary</h2><ul>{items}</ul>'
        "<p>Subtotal: {sub}</p></section>",
        items=[html("<li>{q} \u00d7 {n}: {t}</li>", q=q, n=n, t=_money(c * q)) for _, n, c, q, _ in lines],
        sub=_money(subtotal),
    )
    standard = shipping_cents("standard", subtotal)
    v, e = values.get, errors.get
    fields = html(
        "<fieldset><legend>Shipping address</legend>{name}{street}{city}{postal}{country}</fieldset>"
        "{shipping}"
        "<fieldset><legend>Payment</legend>{card}{expiry}{cvc}</fieldset>",
        name=text_input("full_name", "Full name", v("full_name", ""), error=e("full_name"), autocomplete="name"),
        street=text_input("street", "Street address", v("street", ""), error=e("street")),
        city=text_input("city", "City", v("city", ""), error=e("city")),
        postal=text_input("postal_code", "Postal code", v("postal_code", ""), error=e("postal_code")),
        country=select(
            "country",
            "Country",
            [("", "Choose a country"), *COUNTRIES.items()],
            v("country", ""),
            error=e("country"),
        ),
        shipping=radios(
            "shipping",
            "Shipping",
            [
                ("standard", "Standard shipping", f"3-5 working days, {_money(standard) if standard else 'free'}"),
                ("express", "Express shipping", f"next working day, {_money(SHIPPING['express'])}"),
            ],
            v("shipping", ""),
            error=e("shipping"),
        ),
        card=text_input("card_number", "Card number", v("card_number", ""), error=e("card_number"), hint="16 digits"),
        expiry=text_input("expiry", "Expiry date", v("expiry", ""), error=e("expiry"), hint="MM/YY"),
        cvc=text_input("cvc", "Security code", v("cvc", ""), error=e("cvc"), hint="3 digits on the back"),
    )
    form = post_form("/checkout", fields, submit="Place order", errors=errors)
    return CHROME.page(db, "Checkout", html("{s}{f}", s=summary, f=form), status=422 if errors else 200)


def place_order(db: sqlite3.Connection, req: Req) -> Response:
    lines = _cart(db)
    if not lines:
        return see_other("/cart")
    # The card number and security code are never sent back in a page.
    values = {k: req.form.get(k, "")[:200] for k in CheckoutForm.model_fields if k not in ("card_number", "cvc")}
    form = validate(CheckoutForm, req.form)
    if isinstance(form, dict):
        return _checkout_page(db, values, form)
    errors = {}
    postal = _postal_error(form.country, form.postal_code)
    if postal:
        errors["postal_code"] = postal
    for _, name, _, quantity, stock in lines:
        problem = _line_error(name, quantity, stock)
        if problem:
            errors[f"line-{name}"] = problem + " Change your cart before checking out."
    if errors:
        return _checkout_page(db, values, errors)
    subtotal = sum(c * q for _, _, c, q, _ in lines)
    cursor = db.execute(
        "INSERT INTO orders (placed_on, status, full_name, street, city, postal_code, country, shipping, "
        "shipping_cents, card_last4) VALUES (?, 'processing', ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            TODAY.isoformat(),
            form.full_name,
            form.street,
            form.city,
            form.postal_code.upper(),
            form.country,
            form.shipping,
            shipping_cents(form.shipping, subtotal),
            form.card_number[-4:],
        ),
    )
    order_id = cursor.lastrowid
    for product_id, _, price, quantity, _ in lines:
        db.execute(
            "INSERT INTO order_items (order_id, product_id, quantity, price_cents) VALUES (?, ?, ?, ?)",
            (order_id, product_id, quantity, price),
        )
        db.execute("UPDATE products SET stock = stock - ? WHERE id = ?", (quantity, product_id))
    db.execute("DELETE FROM cart_items")
    return see_other(f"/orders/{order_id}?placed=1")


def orders(db: sqlite3.Connection, req: Req) -> Response:
    rows = db.execute(
        "SELECT o.id, o.placed_on, o.status, o.shipping_cents + coalesce(sum(i.quantity * i.price_cents), 0) "
        "FROM orders o LEFT JOIN order_items i ON i.order_id = o.id GROUP BY o.id ORDER BY o.placed_on DESC, o.id DESC"
    ).fetchall()
    main = html(
        "<table><thead><tr><th>Order</th><th>Placed</th><th>Status</th><th>Total</th></tr></thead>"
        "<tbody>{rows}</tbody></table>",
        rows=[
            html(
                '<tr><td><a href="/orders/{i}">Order #{i}</a></td><td>{d}</td><td>{s}</td><td>{t}</td></tr>',
                i=i,
                d=d,
                s=s.capitalize(),
                t=_money(t),
            )
            for i, d, s, t in rows
        ],
    )
    return CHROME.page(db, "Your orders", main, current="/orders")


def order(db: sqlite3.Connection, req: Req) -> Response:
    order_id = req.params["id"]
    row = db.execute(
        "SELECT placed_on, status, full_name, street, city, postal_code, country, shipping, shipping_cents, "
        "card_last4 FROM orders WHERE id = ?",
        (order_id,),
    ).fetchone()
    if row is None:
        raise HttpError(404, "There is no such order.")
    placed_on, status, name, street, city, postal, country, shipping, shipping_cents, last4 = row
    items = db.execute(
        "SELECT p.id, p.name, i.quantity, i.price_cents FROM order_items i JOIN products p ON p.id = i.product_id "
        "WHERE i.order_id = ? ORDER BY p.name",
        (order_id,),
    ).fetchall()
    subtotal = sum(q * c for _, _, q, c in items)
    cancel = (
        html('<p><a href="/orders/{i}?dialog=cancel">Cancel order</a></p>', i=order_id)
        if status == "processing"
        else Html("")
    )
    main = html(
        "<p>Placed on {d}. Status: <strong>{s}</strong>.</p>"
        "<h2>Items</h2><table><thead><tr><th>Product</th><th>Quantity</th><th>Price</th></tr></thead>"
        "<tbody>{rows}</tbody></table>"
        "<p>Subtotal: {sub}</p><p>Shipping ({ship}): {shipc}</p><p>Total: <strong>{total}</strong></p>"
        "<h2>Delivery</h2><address>{name}<br>{street}<br>{postal} {city}<br>{country}</address>"
        "<p>Paid with the card ending {last4}.</p>{cancel}",
        d=placed_on,
        s=status.capitalize(),
        rows=[
            html('<tr><td><a href="/product/{i}">{n}</a></td><td>{q}</td><td>{c}</td></tr>', i=i, n=n, q=q, c=_money(c))
            for i, n, q, c in items
        ],
        sub=_money(subtotal),
        ship=shipping,
        shipc=_money(shipping_cents),
        total=_money(subtotal + shipping_cents),
        name=name,
        street=street,
        postal=postal,
        city=city,
        country=COUNTRIES.get(country, country),
        last4=last4,
        cancel=cancel,
    )
    modal = None
    if req.query.get("dialog") == "cancel" and status == "processing":
        modal = confirm_dialog(
            f"Cancel order #{order_id}?",
            "The items go back on the shelf and your card is refunded.",
            action=f"/orders/{order_id}/cancel",
            confirm="Yes, cancel order",
            back=f"/orders/{order_id}",
            keep="Keep order",
        )
    notice = f"Thank you! Your order #{order_id} has been placed." if req.query.get("placed") == "1" else None
    if req.query.get("cancelled") == "1":
        notice = f"Order #{order_id} has been cancelled."
    return CHROME.page(db, f"Order #{order_id}", main, notice=notice, modal=modal)


def cancel_order(db: sqlite3.Connection, req: Req) -> Response:
    order_id = req.params["id"]
    row = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        raise HttpError(404, "There is no such order.")
    if row[0] != "processing":
        raise HttpError(409, f"Order #{order_id} is {row[0]}: only orders still processing can be cancelled.")
    db.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (order_id,))
    db.execute(
        "UPDATE products SET stock = stock + (SELECT quantity FROM order_items WHERE order_id = ? "
        "AND product_id = products.id) WHERE id IN (SELECT product_id FROM order_items WHERE order_id = ?)",
        (order_id, order_id),
    )
    return see_other(f"/orders/{order_id}?cancelled=1")


def create_app(db_path: Path) -> Any:
    endpoints = [
        Endpoint("/", home),
        Endpoint("/category/{slug}", category),
        Endpoint("/search", search),
        Endpoint("/product/{id:int}", product),
        Endpoint("/cart", cart),
        Endpoint("/cart/add", add_to_cart, ("POST",)),
        Endpoint("/cart/update", update_cart, ("POST",)),
        Endpoint("/cart/remove", remove_from_cart, ("POST",)),
        Endpoint("/checkout", checkout),
        Endpoint("/checkout", place_order, ("POST",)),
        Endpoint("/orders", orders),
        Endpoint("/orders/{id:int}", order),
        Endpoint("/orders/{id:int}/cancel", cancel_order, ("POST",)),
    ]
    return build_app(db_path, endpoints, CHROME.error_page)
