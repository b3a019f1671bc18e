"""Short constructors for golden actions, so a task's solution reads as the steps a person takes."""

from __future__ import annotations

from agentenv.envs.browser.site import Action, Target

__all__ = ["answer", "choose", "click", "fill", "goto", "press"]


def click(role: str, name: str, nth: int = 0) -> Action:
    return Action("click", Target(role, name, nth))


def fill(role: str, name: str, text: str, nth: int = 0) -> Action:
    return Action("fill", Target(role, name, nth), text)


def choose(name: str, option: str, nth: int = 0) -> Action:
    """Select the option labelled ``option`` in the combobox named ``name``."""
    return Action("select", Target("combobox", name, nth), option)


def press(key: str) -> Action:
    return Action("press", text=key)


def goto(path: str) -> Action:
    return Action("goto", text=path)


def answer(text: str) -> Action:
    return Action("answer", text=text)
