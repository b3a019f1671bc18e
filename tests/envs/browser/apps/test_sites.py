"""The built-in sites as data: enough tasks at every difficulty, golden runs that end the
way their kind requires, checks and subgoals that exist, seeds that are deterministic
and vary, facts that hold for every seed, and SQL that is never built at run time."""

from __future__ import annotations

import ast
import importlib
import json
import sqlite3
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("starlette")

from agentenv import TaskSet
from agentenv.envs.browser.apps import SITES, _golden, _html, _verify, _web
from agentenv.envs.browser.site import Action, Site, SiteTask, Target

from .conftest import build_db

SEEDS = range(8)
ROLES = {"click": {"link", "button", "checkbox", "radio"}, "fill": {"textbox", "searchbox", "spinbutton"}}


def all_tasks() -> list[tuple[Site, SiteTask]]:
    return [(site, task) for site in SITES.values() for task in site.tasks]


def test_every_site_has_enough_tasks_at_every_difficulty_and_of_both_kinds() -> None:
    assert set(SITES) == {"shop", "mail", "booking"}
    assert sum(len(site.tasks) for site in SITES.values()) >= 40
    for site in SITES.values():
        assert len(site.tasks) >= 12, site.name
        assert set(Counter(t.difficulty for t in site.tasks)) == {0, 1, 2, 3}, site.name
        assert {t.writes for t in site.tasks} == {True, False}, site.name


def test_tasks_become_agentenv_tasks_whose_payload_is_json() -> None:
    tasks = TaskSet(task for site in SITES.values() for task in site.agentenv_tasks())  # ids unique
    for task in tasks:
        payload = json.loads(json.dumps(task.payload))
        assert payload == task.payload
        assert [Action.from_json(a).as_json() for a in payload["golden"]] == payload["golden"]


@pytest.mark.parametrize(("site", "task"), all_tasks(), ids=lambda v: getattr(v, "id", getattr(v, "name", "")))
def test_golden_run_is_well_formed(site: Site, task: SiteTask) -> None:
    assert task.check in site.checks
    assert all(name in site.subgoals for name, _ in task.subgoals)
    assert task.start.startswith("/") and not task.start.startswith("//")
    *steps, last = task.golden
    assert (last.tool == "answer") == (not task.writes)
    assert all(a.tool != "answer" for a in steps)
    for action in task.golden:
        if action.tool in ("click", "fill"):
            assert action.target is not None and action.target.role in ROLES[action.tool], action
        if action.tool == "select":
            assert action.target is not None and action.target.role == "combobox" and action.text
    if task.writes and task.difficulty == 3:
        assert task.subgoals, "a multi-step writing task declares its subgoals"


@pytest.mark.parametrize("site", SITES.values(), ids=lambda s: s.name)
def test_seed_is_deterministic_and_varies(site: Site, tmp_path: Path) -> None:
    def dump(seed: int, name: str) -> list[str]:
        db = sqlite3.connect(build_db(site, seed, tmp_path / name))
        try:
            return list(db.iterdump())
        finally:
            db.close()

    assert dump(1, "a.sqlite") == dump(1, "b.sqlite")
    assert dump(1, "a2.sqlite") != dump(2, "c.sqlite")


@pytest.mark.parametrize("site", SITES.values(), ids=lambda s: s.name)
def test_every_task_holds_for_every_seed(site: Site, tmp_path: Path) -> None:
    """On each seed's start state: the golden answer of an information task scores 1 (the facts
    a prompt names do not depend on the seed), a writing task scores 0, and no subgoal holds yet."""
    for seed in SEEDS:
        path = build_db(site, seed, tmp_path / f"{seed}.sqlite")
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            for task in site.tasks:
                given = task.golden[-1].text if not task.writes else None
                score = site.checks[task.check](db, db, given, **task.check_args)
                assert score == (0.0 if task.writes else 1.0), (seed, task.id)
                for name, args in task.subgoals:
                    assert not site.subgoals[name](db, **args), (seed, task.id, name)
        finally:
            db.close()


@pytest.mark.parametrize(
    "module",
    [importlib.import_module(f"agentenv.envs.browser.apps.{m}") for n in SITES for m in (n, f"_{n}_app")]
    + [_web, _verify],
    ids=lambda m: m.__name__.rsplit(".", 1)[-1],
)
def test_sql_is_literal(module: ModuleType) -> None:
    """Every execute() takes a literal SQL string (or the schema): values go in as parameters."""
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("execute")
    ]
    for call in calls:
        sql = call.args[0]
        literal = isinstance(sql, ast.Constant) and isinstance(sql.value, str)
        assert literal or (isinstance(sql, ast.Name) and sql.id == "SCHEMA"), f"line {call.lineno} builds SQL"


def test_html_escapes_every_value_but_markup() -> None:
    out = _html.html("<p title='{t}'>{v}{m}</p>", t="'><script>", v="<b>&", m=_html.Html("<i>ok</i>"))
    assert out == "<p title='&#x27;&gt;&lt;script&gt;'>&lt;b&gt;&amp;<i>ok</i></p>"


def test_answers_are_read_as_one_value() -> None:
    assert _verify.answer_text("  'Camping   MUG'. ") == "camping mug"
    assert _verify.answer_int("7") == 7 and _verify.answer_int("7 or 8") is None and _verify.answer_int("7.0") is None
    assert _verify.answer_cents("$1,240.00") == 124_000 and _verify.answer_cents("34.5") == 3450
    assert _verify.answer_cents("34.50 or 42.50") is None and _verify.answer_cents(None) is None


def test_golden_helpers_name_elements_by_role_and_name() -> None:
    assert _golden.click("link", "Cart").as_json() == {
        "tool": "click",
        "target": {"role": "link", "name": "Cart", "nth": 0},
    }
    assert _golden.choose("Country", "Germany") == Action("select", Target("combobox", "Country"), "Germany")
