"""A Unix-like file system and shell: a hybrid world (`world-fs-v0`).

The state is a flat map from normalised absolute paths to nodes (a file with its
text, or a directory); "/" is implicit. ``ls`` and ``cat`` are code: reading the
state needs no model, and a model could only get them wrong. ``mkdir``, ``touch``,
``write_file``, ``append_file``, ``rm``, ``mv``, ``cp``, ``grep``, ``wc``, ``find`` and
``head`` are emulated, each allowed to write only the paths its arguments name
(``rm(path)``: the entry ``path`` and the entries under ``path/``), with
postconditions that pin what a change must be when there is one (``mkdir`` and
``touch`` only create an empty entry where none was, ``write_file`` writes exactly
the given text, ``cp`` copies exactly a file that exists, ...): every tool that
changes files has one, or an obedient model could write any text through it. Invariants: every entry's
parent is a directory, keys are normalised absolute paths, directories hold no
text, at most 500 entries and 64,000 characters of text in all (the commands that
change files are shown the whole state: it must fit a prompt).

The state model and the starting tree are in ``fs_state.py``; 32 tasks over four levels
(``fs_tasks.py``: 0, one command; 1, two; 2, read, then write what was read; 3, four or
more), each with golden actions and, for emulated commands, the answer a faithful shell
gives. Left out: permissions, owners, links, a current directory (every path is
absolute), globbing.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from agentenv import ToolError
from agentenv.envs.world.predicates import Predicate
from agentenv.envs.world.world import Args, World
from agentenv.envs.world.worlds.fs_state import INITIAL_STATE, MAX_ENTRIES, MAX_TEXT, FsState, Node
from agentenv.envs.world.worlds.fs_tasks import tasks

__all__ = ["WORLD", "FsState", "Node"]


def _normalise(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("use an absolute path (starting with '/')")
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        raise ValueError("a path may not hold control characters")
    clean = "/" + posixpath.normpath(path).lstrip("/")
    return clean


AbsPath = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_normalise)]
Text = Annotated[str, Field(max_length=15_000)]


# -- argument models ------------------------------------------------------------------------


class PathArg(Args):
    path: AbsPath = Field(description="An absolute path.")


class WriteArgs(Args):
    path: AbsPath = Field(description="An absolute path.")
    content: Text = Field(description="The text to write.")


class RmArgs(Args):
    path: AbsPath = Field(description="An absolute path.")
    recursive: bool = Field(default=False, description="Remove a directory and everything in it.")


class MoveArgs(Args):
    src: AbsPath = Field(description="The path to move or copy.")
    dst: AbsPath = Field(description="The exact new path (not a directory to put it in).")


class GrepArgs(Args):
    pattern: Annotated[str, Field(min_length=1, max_length=200)] = Field(description="A plain substring to find.")
    path: AbsPath = Field(description="A file to search.")


class FindArgs(Args):
    path: AbsPath = Field(description="The directory to search under.")
    name: Annotated[str, Field(min_length=1, max_length=100)] = Field(
        description="A shell pattern for the entry's name, e.g. '*.log'."
    )


class HeadArgs(Args):
    path: AbsPath = Field(description="A file.")
    lines: int = Field(default=10, ge=1, le=1000, description="How many lines from the start.")


# -- the world ------------------------------------------------------------------------------

WORLD = World(
    "fs",
    state=FsState,
    initial_state=INITIAL_STATE,
    instructions=(
        "You are at a Unix-like shell. Every path is absolute. Commands are tools: ls and cat read, "
        "the others change files or search them."
    ),
    description=(
        "A Unix-like file system. The state maps each absolute path to a node: a file "
        '{"kind": "file", "content": text} or a directory {"kind": "dir", "content": ""}; "/" is '
        "implicit. Answer as GNU coreutils would: silent on success for commands that change files, "
        "the usual error text otherwise (e.g. \"mkdir: cannot create directory '/a/b': No such file or "
        'directory"). JSON Pointers into the map escape "/" in keys as "~1": /files/~1tmp~1a.txt.'
    ),
    max_turns=12,
    tasks=tasks,
)


def _entry(state: FsState, path: str) -> Node | None:
    return state.files.get(path)


@WORLD.code(reads=["/files"])
def ls(state: FsState, args: PathArg) -> str:
    """List a directory: one name per line, directories with a trailing '/'."""
    if args.path != "/":
        node = _entry(state, args.path)
        if node is None:
            raise ToolError(f"ls: cannot access '{args.path}': No such file or directory")
        if node.kind == "file":
            return args.path
    prefix = args.path.rstrip("/") + "/"
    names = sorted(
        k[len(prefix) :] + ("/" if n.kind == "dir" else "")
        for k, n in state.files.items()
        if k.startswith(prefix) and "/" not in k[len(prefix) :]
    )
    return "\n".join(names)


@WORLD.code(reads=["/files/{path}"])
def cat(state: FsState, args: PathArg) -> str:
    """Print a file's text."""
    node = _entry(state, args.path)
    if node is None:
        raise ToolError(f"cat: {args.path}: No such file or directory")
    if node.kind == "dir":
        raise ToolError(f"cat: {args.path}: Is a directory")
    return node.content


def _node(data: dict[str, Any], side: str, path: str) -> Any:
    return data[side]["files"].get(path)


def _under(data: dict[str, Any], side: str, path: str) -> dict[str, Any]:
    """The entries below ``path``, keyed by their path relative to it ("/b/c")."""
    prefix = path.rstrip("/") + "/"
    return {k[len(prefix) - 1 :]: v for k, v in data[side]["files"].items() if k.startswith(prefix)}


def _moved_exactly(data: dict[str, Any], src: str, dst: str) -> bool:
    # The whole subtree, not the dst node alone: every directory node equals every other,
    # so a model could add, drop or rewrite entries under dst and still pass.
    # src must have existed: "moving" nothing would otherwise delete dst and its subtree.
    # What was at dst may be replaced only as `mv -T` replaces it: a file by a file, an
    # empty directory by a directory; never a directory with entries (onto src's own
    # ancestor too), which a move would delete whole.
    return (
        _node(data, "before", src) is not None
        and _replaceable(data, src, dst)
        and _node(data, "after", src) is None
        and not _under(data, "after", src)
        and _node(data, "after", dst) == _node(data, "before", src)
        and _under(data, "after", dst) == _under(data, "before", src)
    )


def _replaceable(data: dict[str, Any], src: str, dst: str) -> bool:
    """Whether ``mv -T src dst`` may replace what was at dst: nothing, a file by a file, or
    an empty directory by a directory."""
    before = _kind(data, "before", dst)
    if before is None:
        return True
    if before == "file":
        return _kind(data, "before", src) == "file"
    return _kind(data, "before", src) == "dir" and not _under(data, "before", dst)


def _unchanged_or(check: Any) -> Any:
    """A postcondition: the call changed nothing (it failed) or ``check`` holds."""
    return lambda d: d["before"] == d["after"] or check(d)


def _post(name: str, description: str, check: Any) -> Predicate:
    return Predicate(name, fn=_unchanged_or(check), description=description)


def _kind(data: dict[str, Any], side: str, path: str) -> str | None:
    node = _node(data, side, path)
    return node["kind"] if isinstance(node, dict) else None


def _creates(data: dict[str, Any], kind: str) -> bool:
    """Nothing was at the path, and now an empty ``kind`` is: with no content to check, a
    model could otherwise write any text (the answer a task asks for) through mkdir or touch."""
    path = data["args"]["path"]
    return _node(data, "before", path) is None and _node(data, "after", path) == {"kind": kind, "content": ""}


# Every tool that changes files is pinned by a postcondition: a world model talked round by
# text in the agent's arguments may only make the change the call names, or none.
_SUBTREE = ["/files/{path}", "/files/{path}~1*"]  # the entry, and the entries under "path/"
WORLD.emulated(
    "mkdir",
    PathArg,
    "Create one directory; its parent must exist and the path must not.",
    writes=["/files/{path}"],
    postconditions=[
        _post("creates_empty_dir", "nothing was at the path; now an empty directory is", lambda d: _creates(d, "dir"))
    ],
)
WORLD.emulated(
    "touch",
    PathArg,
    "Create an empty file if the path does not exist; an existing entry is left as it is.",
    writes=["/files/{path}"],
    postconditions=[
        _post("creates_empty_file", "nothing was at the path; now an empty file is", lambda d: _creates(d, "file"))
    ],
)
WORLD.emulated(
    "write_file",
    WriteArgs,
    "Write text to a file, replacing what it held (like `printf '%s' TEXT > PATH`).",
    writes=["/files/{path}"],
    postconditions=[
        _post(
            "writes_exactly",
            "the path was no directory, and the file holds exactly the given text",
            lambda d: (
                _kind(d, "before", d["args"]["path"]) != "dir"
                and _node(d, "after", d["args"]["path"]) == {"kind": "file", "content": d["args"]["content"]}
            ),
        )
    ],
)
WORLD.emulated(
    "append_file",
    WriteArgs,
    "Append text to the end of a file (like `printf '%s' TEXT >> PATH`); creates the file if missing.",
    writes=["/files/{path}"],
    postconditions=[
        _post(
            "appends_exactly",
            "the path was no directory, and the file holds its old text followed by the given text",
            lambda d: (
                _kind(d, "before", d["args"]["path"]) != "dir"
                and _node(d, "after", d["args"]["path"])
                == {
                    "kind": "file",
                    "content": ((_node(d, "before", d["args"]["path"]) or {}).get("content", ""))
                    + d["args"]["content"],
                }
            ),
        )
    ],
)
WORLD.emulated(
    "rm",
    RmArgs,
    "Remove a file, or with recursive=true a directory and everything under it.",
    writes=_SUBTREE,
    postconditions=[
        _post(
            "removes_path",
            "the path is gone, and it was a file unless recursive=true",
            lambda d: (
                _node(d, "after", d["args"]["path"]) is None
                and (_kind(d, "before", d["args"]["path"]) == "file" or d["args"]["recursive"])
            ),
        )
    ],
)
WORLD.emulated(
    "mv",
    MoveArgs,
    "Move or rename a file or directory (with everything under it) to exactly dst (like `mv -T`).",
    writes=["/files/{src}", "/files/{src}~1*", "/files/{dst}", "/files/{dst}~1*"],
    postconditions=[
        _post(
            "moves_exactly",
            "src existed; it and everything under it are gone, and dst held nothing, a file where src is a file, "
            "or an empty directory where src is a directory, and now holds what src held, with exactly src's "
            "entries under it",
            lambda d: _moved_exactly(d, d["args"]["src"], d["args"]["dst"]),
        )
    ],
)
WORLD.emulated(
    "cp",
    MoveArgs,
    "Copy a file to exactly dst (like `cp -T`).",
    writes=["/files/{dst}"],
    postconditions=[
        _post(
            "copies_exactly",
            "src is a file, dst was no directory, and dst holds what src holds",
            lambda d: (
                _kind(d, "before", d["args"]["src"]) == "file"
                and _kind(d, "before", d["args"]["dst"]) != "dir"
                and _node(d, "after", d["args"]["dst"]) == _node(d, "before", d["args"]["src"])
            ),
        )
    ],
)
WORLD.emulated(
    "grep", GrepArgs, "Print the lines of a file that contain the pattern (a plain substring).", reads=_SUBTREE
)
WORLD.emulated("wc", PathArg, "Print a file's line, word and byte counts and its path.", reads=["/files/{path}"])
WORLD.emulated(
    "find",
    FindArgs,
    "Print every path under a directory whose last part matches the shell pattern, one per line, sorted.",
    reads=_SUBTREE,
)
WORLD.emulated("head", HeadArgs, "Print the first lines of a file.", reads=["/files/{path}"])


def _parents_exist(state: FsState) -> bool:
    return all(
        posixpath.dirname(k) == "/" or getattr(state.files.get(posixpath.dirname(k)), "kind", None) == "dir"
        for k in state.files
    )


_NORMAL = re.compile(r"^(/[^/]+)+$")
WORLD.invariant("parents_are_directories", _parents_exist, "every entry's parent is a directory")
WORLD.invariant(
    "normalised_paths",
    lambda s: all(_NORMAL.match(k) and posixpath.normpath(k) == k and "/./" not in k + "/" for k in s.files),
    "every key is a normalised absolute path",
)
WORLD.invariant("directories_hold_no_text", lambda s: all(n.content == "" for n in s.files.values() if n.kind == "dir"))
WORLD.invariant(
    "bounded",
    lambda s: len(s.files) <= MAX_ENTRIES and sum(len(n.content) for n in s.files.values()) <= MAX_TEXT,
    f"at most {MAX_ENTRIES} entries and {MAX_TEXT} characters of text",
)
