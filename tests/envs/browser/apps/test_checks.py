"""The checks under attack: the intended change scores 1, and an agent that writes more than
asked (ten orders, every message archived, a second reply), writes the wrong thing (another
item, label, room or address) or answers with several candidates scores 0. The writes go
through the apps over HTTP, as a browser would send them."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from agentenv.envs.browser.apps import BOOKING, MAIL, SHOP

# -- shop -----------------------------------------------------------------------------

ADA = {"full_name": "Ada Moreau", "street": "12 Elm Road", "city": "Springfield", "postal_code": "62704",
       "country": "US", "shipping": "standard", "card_number": "4242 4242 4242 4242", "expiry": "12/27",
       "cvc": "123"}  # fmt: skip
STEEL_KETTLE, COPPER_KETTLE, LAMP, BACKPACK, SPEAKER = 2, 1, 5, 8, 12


def add(c, product_id: int, quantity: int = 1) -> None:
    assert c.post("/cart/add", data={"product_id": product_id, "quantity": quantity}).status_code == 200


def remove(c, product_id: int) -> None:
    assert c.post("/cart/remove", data={"product_id": product_id}).status_code == 200


def checkout(c, **changes: str) -> None:
    r = c.post("/checkout", data={**ADA, **changes})
    assert r.status_code == 200 and "has been placed" in r.text, r.text[-2000:]


def test_shop_one_order_scores_and_a_second_order_spoils_it(episode) -> None:
    ep = episode(SHOP)
    checkout(ep.client)
    assert ep.score("checkout-cart") == 1.0
    add(ep.client, STEEL_KETTLE)
    checkout(ep.client)
    assert ep.score("checkout-cart") == 0.0


def test_shop_ten_orders_score_zero(episode) -> None:
    ep = episode(SHOP)
    checkout(ep.client)
    for _ in range(9):
        add(ep.client, LAMP)
        checkout(ep.client)
    assert len(ep.query("SELECT id FROM orders")) == 14
    assert ep.score("checkout-cart") == 0.0


@pytest.mark.parametrize(
    "wrong",
    [
        {"postal_code": "62705"},
        {"shipping": "express"},
        {"full_name": "Ada Morrow"},
        {"card_number": "5555555555554444"},
    ],
)
def test_shop_order_with_another_address_shipping_or_card_scores_zero(episode, wrong) -> None:
    ep = episode(SHOP)
    checkout(ep.client, **wrong)
    assert ep.score("checkout-cart") == 0.0


def test_shop_order_with_an_extra_or_missing_item_scores_zero(episode) -> None:
    ep = episode(SHOP)
    add(ep.client, LAMP)
    checkout(ep.client)
    assert ep.score("checkout-cart") == 0.0
    ep = episode(SHOP)
    add(ep.client, BACKPACK)  # the cart's two items not removed: they are ordered too
    lena = {"full_name": "Lena Novak", "street": "Hauptstrasse 5", "city": "Berlin", "postal_code": "10115",
            "country": "DE", "shipping": "express", "card_number": "5555 5555 5555 4444", "expiry": "03/28",
            "cvc": "737"}  # fmt: skip
    checkout(ep.client, **lena)
    assert ep.score("buy-backpack-only") == 0.0


def test_shop_cart_checks_want_exactly_the_cart_asked_for(episode) -> None:
    ep = episode(SHOP)
    add(ep.client, LAMP)
    assert ep.score("add-lamp") == 1.0
    add(ep.client, LAMP)
    assert ep.score("add-lamp") == 0.0  # two lamps
    ep = episode(SHOP)
    add(ep.client, LAMP)
    remove(ep.client, SPEAKER)
    assert ep.score("add-lamp") == 0.0
    ep = episode(SHOP)
    add(ep.client, COPPER_KETTLE, 2)
    ep.client.post("/orders/1003/cancel")  # a write outside the cart
    assert ep.score("search-add-copper") == 0.0


def test_shop_cancelling_is_the_only_change_allowed(episode) -> None:
    ep = episode(SHOP)
    ep.client.post("/orders/1003/cancel")
    assert ep.score("cancel-order") == 1.0
    add(ep.client, LAMP)
    assert ep.score("cancel-order") == 0.0
    assert ep.client.post("/orders/1002/cancel").status_code == 409  # shipped: the app refuses


@pytest.mark.parametrize(
    ("task", "stuffed", "right"),
    [
        ("cheapest-outdoor", "Camping Mug, Steel Kettle, Copper Kettle", "camping mug"),
        ("price-lamp", "34.50 or 42.50", "$34.50"),
        ("count-kitchen", "12 13 14", "12"),
        ("which-order-knife", "1001, 1002, 1003, 1004", "#1002"),
        ("delivered-spend", "190.99 / 147.00", "190.99"),
        ("stock-monitor-stand", "4 (or 5)", "4."),
    ],
)
def test_shop_stuffed_answers_score_zero(episode, task, stuffed, right) -> None:
    ep = episode(SHOP)
    assert ep.score(task, stuffed) == 0.0
    assert ep.score(task, right) == 1.0


# -- mail -----------------------------------------------------------------------------

TOMAS = {10: "Draft budget", 14: "Budget figures v2", 21: "Budget timeline", 28: "Budget sign-off"}  # id: subject


def bulk(c, ids, action: str = "archive") -> None:
    r = c.post("/bulk", data={"ids": [str(i) for i in ids], "action": action, "back": "/folder/inbox"})
    assert r.status_code == 200


def reply(c, message_id: int, body: str, to: str | None = None) -> None:
    form = c.get(f"/compose?reply_to={message_id}").text
    assert "Re: " in form
    data = {"reply_to": str(message_id), "subject": "Re: Planning offsite", "body": body,
            "to": to or "lena.novak@northwind.test"}  # fmt: skip
    assert c.post("/compose", data=data).status_code == 200


def test_mail_archiving_exactly_the_asked_messages(episode) -> None:
    ep = episode(MAIL)
    assert [s for (s,) in ep.query("SELECT subject FROM messages WHERE id IN (10, 14, 21, 28) ORDER BY id")] == list(
        TOMAS.values()
    )
    for message_id in (2, 3, 5):  # reading is not a change
        ep.client.get(f"/message/{message_id}")
    bulk(ep.client, TOMAS)
    assert ep.score("archive-tomas") == 1.0
    bulk(ep.client, [2])
    assert ep.score("archive-tomas") == 0.0


def test_mail_archiving_everything_or_too_little_scores_zero(episode) -> None:
    ep = episode(MAIL)
    bulk(ep.client, range(1, 35))
    assert ep.score("archive-tomas") == 0.0 and ep.score("archive-digest") == 0.0
    ep = episode(MAIL)
    bulk(ep.client, list(TOMAS)[:3])
    assert ep.score("archive-tomas") == 0.0
    ep = episode(MAIL)
    bulk(ep.client, list(TOMAS), action="trash")
    assert ep.score("archive-tomas") == 0.0


def test_mail_reply_must_be_one_reply_to_the_sender_saying_the_thing(episode) -> None:
    ep = episode(MAIL)
    reply(ep.client, 1, "Hi Lena, Thursday works for me. Sam")
    assert ep.score("reply-offsite") == 1.0
    reply(ep.client, 1, "Thursday works for me.")
    assert ep.score("reply-offsite") == 0.0  # two replies
    for body, to in [
        ("Thursday works for me.", "lena.novak@northwind.test, tomas.berg@northwind.test"),
        ("Friday works for me.", None),
        ("Thursday works for me. " + "x" * 3000, None),
    ]:
        ep = episode(MAIL)
        reply(ep.client, 1, body, to)
        assert ep.score("reply-offsite") == 0.0, (body[:40], to)
    ep = episode(MAIL)
    reply(ep.client, 1, "Thursday works for me.")
    ep.client.post("/message/1/star")
    assert ep.score("reply-offsite") == 0.0


def test_mail_label_checks_want_the_one_label_on_the_right_messages(episode) -> None:
    ep = episode(MAIL)
    ep.client.post("/message/4/labels", data={"label": ["2"]})  # Travel
    assert ep.score("label-flight") == 1.0
    ep = episode(MAIL)
    ep.client.post("/message/4/labels", data={"label": ["1", "2", "3"]})
    assert ep.score("label-flight") == 0.0
    ep = episode(MAIL)
    ep.client.post("/message/4/labels", data={"label": ["1"]})
    assert ep.score("label-flight") == 0.0


def test_mail_new_label_on_more_messages_or_beside_other_labels_scores_zero(episode) -> None:
    receipts = [17, 26]
    ep = episode(MAIL)
    ep.client.post("/labels", data={"name": " receipts "})  # whitespace and case aside
    for message_id in receipts:
        ep.client.post(f"/message/{message_id}/labels", data={"label": ["4"]})
    assert ep.score("receipts-label") == 1.0
    ep.client.post("/message/3/labels", data={"label": ["1", "4"]})  # a third message
    assert ep.score("receipts-label") == 0.0
    ep = episode(MAIL)
    for name in ("Receipts", "Bills"):
        ep.client.post("/labels", data={"name": name})
    for message_id in receipts:
        ep.client.post(f"/message/{message_id}/labels", data={"label": ["4"]})
    assert ep.score("receipts-label") == 0.0


@pytest.mark.parametrize(
    ("task", "stuffed", "right"),
    [
        ("offsite-room", "4B or 5C", "4B"),
        ("vpn-ticket", "INC-48213 INC-48214", "inc-48213"),
        ("top-sender", "Tomas Berg, Priya Shah", "Tomas Berg"),
        ("unread-count", "7 8", "7"),
        ("newest-subject", "Planning offsite / Invoice 2291", "planning offsite"),
        ("priya-count", "3 or 4", "3"),
    ],
)
def test_mail_stuffed_answers_score_zero(episode, task, stuffed, right) -> None:
    ep = episode(MAIL)
    assert ep.score(task, stuffed) == 0.0
    assert ep.score(task, right) == 1.0


# -- booking --------------------------------------------------------------------------

INTERVIEW = {"room": "2", "day": "2025-06-19", "start_time": "10:00", "end_time": "11:00", "title": "Interview panel",
             "attendees": "4", "organizer": "sam.rivera@northwind.test", "notes": ""}  # fmt: skip


def book(c, **changes: str) -> int:
    r = c.post("/bookings/new", data={**INTERVIEW, **changes})
    return r.status_code


def test_booking_cancel_exactly_the_one_booking(episode) -> None:
    ep = episode(BOOKING)
    ep.client.post("/bookings/2/cancel")
    assert ep.score("cancel-budget") == 1.0
    ep.client.post("/bookings/5/cancel")
    assert ep.score("cancel-budget") == 0.0 and ep.score("cancel-vendor") == 0.0
    ep = episode(BOOKING)
    ep.client.post("/bookings/5/cancel")
    assert ep.score("cancel-budget") == 0.0


def test_booking_one_new_booking_with_these_details(episode) -> None:
    ep = episode(BOOKING)
    assert book(ep.client) == 200
    assert ep.score("book-interview") == 1.0
    assert book(ep.client, start_time="11:00", end_time="12:00") == 200
    assert ep.score("book-interview") == 0.0  # two bookings
    for wrong in ({"attendees": "5"}, {"room": "3"}, {"title": "Interview"}, {"end_time": "11:30"}):
        ep = episode(BOOKING)
        assert book(ep.client, **wrong) == 200
        assert ep.score("book-interview") == 0.0, wrong


def test_booking_any_free_room_that_fits_and_the_app_refuses_the_rest(episode) -> None:
    ep = episode(BOOKING)
    quarterly = {"day": "2025-06-20", "start_time": "10:00", "end_time": "12:00", "title": "Quarterly planning",
                 "attendees": "12", "organizer": "omar.haddad@northwind.test"}  # fmt: skip
    r = ep.client.post("/bookings/new", data={**INTERVIEW, **quarterly, "room": "3"})
    assert r.status_code == 422 and "Cedar is already booked from 09:00 to 12:00" in r.text
    r = ep.client.post("/bookings/new", data={**INTERVIEW, **quarterly, "room": "6"})
    assert r.status_code == 422 and "Fir seats at most 10 people" in r.text
    assert ep.score("quarterly-planning") == 0.0
    assert ep.client.post("/bookings/new", data={**INTERVIEW, **quarterly, "room": "5"}).status_code == 200
    assert ep.score("quarterly-planning") == 1.0


def test_booking_edit_changes_exactly_the_asked_fields(episode) -> None:
    retro = {"room": "4", "day": "2025-06-19", "start_time": "15:00", "end_time": "16:00", "title": "Team retro",
             "attendees": "6", "organizer": "ana.lopez@northwind.test", "notes": ""}  # fmt: skip
    ep = episode(BOOKING)
    assert ep.client.post("/bookings/3/edit", data=retro).status_code == 200
    assert ep.score("move-retro") == 1.0
    for wrong in ({"notes": "moved"}, {"room": "1", "attendees": "4"}, {"end_time": "16:30"}):
        ep = episode(BOOKING)
        assert ep.client.post("/bookings/3/edit", data={**retro, **wrong}).status_code == 200
        assert ep.score("move-retro") == 0.0, wrong
    ep = episode(BOOKING)
    assert ep.client.post("/bookings/3/edit", data=retro).status_code == 200
    ep.client.post("/bookings/5/cancel")
    assert ep.score("move-retro") == 0.0


@pytest.mark.parametrize(
    ("task", "stuffed", "right"),
    [
        ("organizer-design", "mei.tan@northwind.test, omar.haddad@northwind.test", "Mei.Tan@northwind.test"),
        ("omar-count", "3, 4", "3"),
        ("count-birch", "3 or 4", "3"),
        ("projector-floor3", "Elm Fir", "elm"),
        ("capacity-cedar", "12-20", "12"),
    ],
)
def test_booking_stuffed_answers_score_zero(episode, task, stuffed, right) -> None:
    ep = episode(BOOKING)
    assert ep.score(task, stuffed) == 0.0
    assert ep.score(task, right) == 1.0
