"""The page view: Playwright's accessibility snapshot with the env's own refs (no browser needed)."""

from __future__ import annotations

from agentenv.envs.browser.view import RefBook, element_lines, parse

SNAPSHOT = """- generic [active] [ref=e1]:
  - navigation "Main" [ref=e2]:
    - link "Apples & \\"pears\\"" [ref=e3] [cursor=pointer]:
      - /url: /a
  - main [ref=e4]:
    - 'heading "Cart: 3 items" [level=2] [ref=e5]'
    - generic [ref=e6]:
      - text: Note
      - textbox "Note" [ref=e7]: hello world
    - combobox "Ship" [ref=e8]:
      - option "Standard"
      - 'option "Express: next day" [selected]'
    - 'button "Say: \\"hi\\" #1" [ref=e9]'
    - button "Nope" [disabled] [ref=e10]
    - generic [ref=e11] [cursor=pointer]: Clickable
    - paragraph [ref=e12]: "text: with colon"
"""


def test_refs_only_on_actionable_elements_and_noise_dropped() -> None:
    view = parse(SNAPSHOT, RefBook(), url="/cart", title="Cart")
    text = "\n".join(view.lines)
    assert "[ref=" not in text and "[cursor=pointer]" not in text and "[active]" not in text
    assert [(n.ref, n.role, n.name) for n in view.nodes.values()] == [
        ("e1", "link", 'Apples & "pears"'),
        ("e2", "textbox", "Note"),
        ("e3", "combobox", "Ship"),
        ("e4", "button", 'Say: "hi" #1'),
        ("e5", "button", "Nope"),
        ("e6", "generic", ""),
    ]
    assert view.nodes["e5"].disabled and not view.nodes["e4"].disabled
    assert '  - [e1] link "Apples & \\"pears\\"":' in view.lines
    assert '  - heading "Cart: 3 items" [level=2]' in view.lines  # a YAML-quoted key, read back
    assert '  - [e2] textbox "Note": hello world' in view.lines  # the unnamed wrapper left out, its children moved left
    assert '  - paragraph: "text: with colon"' in view.lines
    assert view.lines[0] == '- navigation "Main":'  # the unnamed root wrapper left out


def test_a_reader_of_the_view_gets_each_element_back() -> None:
    view = parse(SNAPSHOT, RefBook(), url="/cart", title="Cart")
    assert [(r, role, name) for r, role, name in element_lines(view.render(0, 10_000))] == [
        (n.ref, n.role, n.name) for n in view.nodes.values()
    ]


def test_a_url_or_title_made_of_what_was_typed_is_cut_like_any_line() -> None:
    # A form's GET puts its text in the URL: 5,000 emoji made a 60 KB URL, printed in every
    # later observation of the page and kept in the state's history.
    view = parse(SNAPSHOT, RefBook(), url="/search?q=" + "%F0%9F%98%80" * 5000, title="Results for " + "x" * 5000)
    assert len(view.url) == 2000 and view.url.endswith("…") and len(view.title) == 400
    text = view.render(0, 4000)
    assert len(text.split("\n")[0]) == len("URL: ") + 2000


def test_refs_stay_with_their_element_and_are_never_reused() -> None:
    book = RefBook()
    first = parse(SNAPSHOT, book, url="/", title="")
    again = parse(SNAPSHOT, book, url="/", title="")  # the same document looked at twice
    assert list(again.nodes) == list(first.nodes)
    new_page = parse(SNAPSHOT.replace("[ref=e", "[ref=f1e"), book, url="/next", title="")  # a new document
    assert not set(new_page.nodes) & set(first.nodes)
    assert book.issued("e3") and "e3" not in new_page.nodes  # stale, and known to be
    assert not book.issued("e99")


def test_a_restored_book_gives_the_same_page_the_same_refs() -> None:
    book = RefBook()
    parse(SNAPSHOT, book, url="/", title="")
    view = parse(SNAPSHOT.replace("[ref=e", "[ref=f1e"), book, url="/", title="")
    saved = book.export(view)
    restored = RefBook()
    restored.restore(saved)
    reopened = parse(SNAPSHOT.replace("[ref=e", "[ref=f7e"), restored, url="/", title="")  # other Playwright refs
    assert list(reopened.nodes) == list(view.nodes)
    assert restored.next == book.next


def test_a_long_page_is_shown_a_window_at_a_time_with_a_note() -> None:
    snapshot = "".join(f'- button "Item {i}" [ref=e{i}]\n' for i in range(1, 501))
    view = parse(snapshot, RefBook(), url="/long", title="Long")
    first = view.render(0, 1_000)
    assert len(first) < 1_200
    assert first.endswith("shown; scroll down for more]") and "[lines 1-" in first
    _, end = view.window(0, 1_000)
    later = view.render(end - 2, 1_000)
    assert f"[lines {end - 1}-" in later and "scroll up for earlier lines and scroll down for more" in later
    last = view.render(10_000, 1_000)  # past the end: still shows the last lines
    assert 'button "Item 500"' in last and "scroll down" not in last
    assert "[lines" not in view.render(0, 100_000)


def test_very_long_lines_are_cut() -> None:
    view = parse(f"- paragraph [ref=e1]: {'x' * 5_000}\n", RefBook(), url="/", title="")
    assert len(view.lines[0]) <= 400 and view.lines[0].endswith("…")
