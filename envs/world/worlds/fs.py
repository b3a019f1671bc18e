"""A Unix-like file system and shell: a hybrid world (`world-fs-v0`).

The state is a flat map from normalised absolute paths to nodes (a file with its
text, or a directory); "/" is implicit. ``ls`` and ``cat`` are code: reading the
state needs no model, and a model could only get them wrong. ``mkdir``, ``touch``,
``write_file``, ``append_file``, ``rm``, ``mv``, ``cp``, ``grep``, ``wc``, ``find`` and
``head`` are emulated, each allowed to write only the paths its arguments name
(``rm(path)``: the entry ``path`` and the entries under ``path/``), with
postconditions that pin what a change must be when there is one (``write_file``
writes exactly the given text, ``cp`` copies exactly, ...). Invariants: every entry's
parent is a directory, keys are normalised absolute paths, directories hold no
text, at most 500 entries and 64,000 characters of text in all (the commands that
change files are shown the whole state: it must fit a prompt).

32 tasks over four levels (0: one command; 1: two; 2: read, then write what was
read; 3: four or more), each with golden actions and, for emulated commands, the
answer a faithful shell gives. Left out: permissions, owners, links, a current
directory (every path is absolute), globbing.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agentenv import State, Task, ToolError
from agentenv.envs.world.paths import escape
from agentenv.envs.world.predicates import Predicate
from agentenv.envs.world.world import Args, Response, World, respond, world_task

__all__ = ["WORLD", "FsState", "Node"]

MAX_ENTRIES = 500
MAX_TEXT = 64_000
"""Characters of text in all files together: a state the world model is shown whole stays small."""


def _normalise(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("use an absolute path (starting with '/')")
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        raise ValueError("a path may not hold control characters")
    clean = "/" + posixpath.normpath(path).lstrip("/")
    return clean


AbsPath = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_normalise)]
Text = Annotated[str, Field(max_length=15_000)]


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["file", "dir"]
    content: str = Field(default="", max_length=MAX_TEXT)


class FsState(State):
    files: dict[str, Node] = {}


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
    initial_state=FsState(
        files={
            "/etc": Node(kind="dir"),
            "/etc/hosts": Node(kind="file", content="127.0.0.1 localhost\n"),
            "/home": Node(kind="dir"),
            "/home/user": Node(kind="dir"),
            "/home/user/notes.txt": Node(kind="file", content="buy milk\ncall bob\n"),
            "/home/user/todo.txt": Node(kind="file", content="write report\nfix bug\n"),
            "/home/user/docs": Node(kind="dir"),
            "/home/user/docs/report.md": Node(kind="file", content="# Quarterly report\nDraft.\n"),
            "/home/user/logs": Node(kind="dir"),
            "/home/user/logs/app.log": Node(
                kind="file", content="INFO start\nERROR disk full\nINFO retry\nERROR timeout\n"
            ),
            "/home/user/logs/old.log": Node(kind="file", content="INFO old run\n"),
            "/tmp": Node(kind="dir"),
            "/tmp/scratch.txt": Node(kind="file", content="temp\n"),
        }
    ),
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
    tasks=lambda: _tasks(),  # defined below, with the helpers its golden answers use
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


def _unchanged_or(check: Any) -> Any:
    """A postcondition: the call changed nothing (it failed) or ``check`` holds."""
    return lambda d: d["before"] == d["after"] or check(d)


def _post(name: str, description: str, check: Any) -> Predicate:
    return Predicate(name, fn=_unchanged_or(check), description=description)


_SUBTREE = ["/files/{path}", "/files/{path}~1*"]  # the entry, and the entries under "path/"
WORLD.emulated("mkdir", PathArg, "Create one directory; its parent must exist.", writes=["/files/{path}"])
WORLD.emulated("touch", PathArg, "Create an empty file if the path does not exist.", writes=["/files/{path}"])
WORLD.emulated(
    "write_file",
    WriteArgs,
    "Write text to a file, replacing what it held (like `printf '%s' TEXT > PATH`).",
    writes=["/files/{path}"],
    postconditions=[
        _post(
            "writes_exactly",
            "the file holds exactly the given text",
            lambda d: _node(d, "after", d["args"]["path"]) == {"kind": "file", "content": d["args"]["content"]},
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
            "the file holds its old text followed by the given text",
            lambda d: (
                _node(d, "after", d["args"]["path"])
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
    postconditions=[_post("removes_path", "the path is gone", lambda d: _node(d, "after", d["args"]["path"]) is None)],
)
WORLD.emulated(
    "mv",
    MoveArgs,
    "Move or rename a file or directory (with everything under it) to exactly dst (like `mv -T`).",
    writes=["/files/{src}", "/files/{src}~1*", "/files/{dst}", "/files/{dst}~1*"],
    postconditions=[
        _post(
            "moves_exactly",
            "src is gone and dst holds what src held",
            lambda d: (
                _node(d, "after", d["args"]["src"]) is None
                and _node(d, "after", d["args"]["dst"]) == _node(d, "before", d["args"]["src"])
            ),
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
            "dst holds what src holds",
            lambda d: _node(d, "after", d["args"]["dst"]) == _node(d, "before", d["args"]["src"]),
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


# -- golden answers and goals, in the shell's words -----------------------------------------

INITIAL: dict[str, dict[str, str]] = WORLD.initial_state["files"]


def _ptr(path: str) -> str:
    return "/files/" + escape(path)


def add_dir(path: str) -> dict[str, Any]:
    return {"op": "add", "path": _ptr(path), "value": {"kind": "dir", "content": ""}}


def add_file(path: str, content: str = "") -> dict[str, Any]:
    return {"op": "add", "path": _ptr(path), "value": {"kind": "file", "content": content}}


def remove(path: str) -> dict[str, Any]:
    return {"op": "remove", "path": _ptr(path)}


def move(src: str, dst: str) -> dict[str, Any]:
    return {"op": "move", "from": _ptr(src), "path": _ptr(dst)}


def is_dir(path: str) -> dict[str, Any]:
    return {"==": [{"val": ["files", path, "kind"]}, "dir"]}


def is_file(path: str, content: str | None = None) -> dict[str, Any]:
    kind = {"==": [{"val": ["files", path, "kind"]}, "file"]}
    if content is None:
        return kind
    return {"and": [kind, {"==": [{"val": ["files", path, "content"]}, content]}]}


def gone(path: str) -> dict[str, Any]:
    return {"!": [{"val": ["files", path]}]}


def every(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"and": list(rules)}


def _text(path: str) -> str:
    return INITIAL[path]["content"]


def _grep(pattern: str, path: str) -> str:
    return "".join(line + "\n" for line in _text(path).splitlines() if pattern in line)


def _wc(path: str) -> str:
    text = _text(path)
    return f"{len(text.splitlines())} {len(text.split())} {len(text.encode())} {path}"


def _find(root: str, name: str, files: dict[str, Any] | None = None) -> str:
    keys = sorted(
        k for k in (files or INITIAL) if k.startswith(root + "/") and fnmatch.fnmatch(k.rsplit("/", 1)[1], name)
    )
    return "".join(k + "\n" for k in keys)


def _head(path: str, lines: int) -> str:
    return "".join(line + "\n" for line in _text(path).splitlines()[:lines])


def ok(*patch: dict[str, Any]) -> Response:
    """A silent success (as coreutils are) with this change."""
    return respond("", *patch)


H = "/home/user"
NOTES, TODO, REPORT = f"{H}/notes.txt", f"{H}/todo.txt", f"{H}/docs/report.md"
APP, OLD = f"{H}/logs/app.log", f"{H}/logs/old.log"


def _tasks() -> list[Task]:
    t = world_task
    errors = _grep("ERROR", APP)
    return [
        # -- level 0: one command ----------------------------------------------------------
        t(
            "fs-mkdir-projects",
            f"Create the directory {H}/projects.",
            goal=is_dir(f"{H}/projects"),
            golden=[("mkdir", {"path": f"{H}/projects"}, ok(add_dir(f"{H}/projects")))],
            family="fs-create",
        ),
        t(
            "fs-touch-empty",
            f"Create an empty file {H}/empty.txt.",
            goal=is_file(f"{H}/empty.txt", ""),
            golden=[("touch", {"path": f"{H}/empty.txt"}, ok(add_file(f"{H}/empty.txt")))],
            family="fs-create",
        ),
        t(
            "fs-write-hello",
            f"Write the text 'hello world' followed by a newline to {H}/hello.txt.",
            goal=is_file(f"{H}/hello.txt", "hello world\n"),
            golden=[
                (
                    "write_file",
                    {"path": f"{H}/hello.txt", "content": "hello world\n"},
                    ok(add_file(f"{H}/hello.txt", "hello world\n")),
                )
            ],
            family="fs-write",
        ),
        t(
            "fs-rm-scratch",
            "Delete /tmp/scratch.txt.",
            goal=gone("/tmp/scratch.txt"),
            golden=[("rm", {"path": "/tmp/scratch.txt"}, ok(remove("/tmp/scratch.txt")))],
            family="fs-remove",
        ),
        t(
            "fs-append-notes",
            f"Add the line 'buy eggs' to the end of {NOTES}.",
            goal=is_file(NOTES, _text(NOTES) + "buy eggs\n"),
            golden=[
                (
                    "append_file",
                    {"path": NOTES, "content": "buy eggs\n"},
                    ok({"op": "replace", "path": _ptr(NOTES) + "/content", "value": _text(NOTES) + "buy eggs\n"}),
                )
            ],
            family="fs-write",
        ),
        t(
            "fs-mkdir-backup",
            f"Make a directory called backup in {H}.",
            goal=is_dir(f"{H}/backup"),
            golden=[("mkdir", {"path": f"{H}/backup"}, ok(add_dir(f"{H}/backup")))],
            family="fs-create",
        ),
        t(
            "fs-rm-old-log",
            f"Remove the old log file {OLD}.",
            goal=gone(OLD),
            golden=[("rm", {"path": OLD}, ok(remove(OLD)))],
            family="fs-remove",
        ),
        t(
            "fs-rename-todo",
            f"Rename {TODO} to {H}/tasks.txt.",
            goal=every(gone(TODO), is_file(f"{H}/tasks.txt", _text(TODO))),
            golden=[("mv", {"src": TODO, "dst": f"{H}/tasks.txt"}, ok(move(TODO, f"{H}/tasks.txt")))],
            family="fs-move",
        ),
        # -- level 1: two commands -----------------------------------------------------------
        t(
            "fs-archive-old-log",
            f"Create {H}/archive and move {OLD} into it (keeping its name).",
            goal=every(gone(OLD), is_file(f"{H}/archive/old.log", _text(OLD))),
            subgoals={"archive_exists": is_dir(f"{H}/archive")},
            golden=[
                ("mkdir", {"path": f"{H}/archive"}, ok(add_dir(f"{H}/archive"))),
                ("mv", {"src": OLD, "dst": f"{H}/archive/old.log"}, ok(move(OLD, f"{H}/archive/old.log"))),
            ],
            family="fs-move",
            difficulty=1,
        ),
        t(
            "fs-project-readme",
            f"Create the directory {H}/projects with a file README.md in it that says '# Projects'"
            " followed by a newline.",
            goal=is_file(f"{H}/projects/README.md", "# Projects\n"),
            subgoals={"dir": is_dir(f"{H}/projects")},
            golden=[
                ("mkdir", {"path": f"{H}/projects"}, ok(add_dir(f"{H}/projects"))),
                (
                    "write_file",
                    {"path": f"{H}/projects/README.md", "content": "# Projects\n"},
                    ok(add_file(f"{H}/projects/README.md", "# Projects\n")),
                ),
            ],
            family="fs-create",
            difficulty=1,
        ),
        t(
            "fs-copy-then-append",
            f"Copy {NOTES} to {H}/docs/notes.txt, then add the line 'copied' to the copy.",
            goal=every(is_file(f"{H}/docs/notes.txt", _text(NOTES) + "copied\n"), is_file(NOTES, _text(NOTES))),
            subgoals={"copied": is_file(f"{H}/docs/notes.txt")},
            golden=[
                ("cp", {"src": NOTES, "dst": f"{H}/docs/notes.txt"}, ok(add_file(f"{H}/docs/notes.txt", _text(NOTES)))),
                (
                    "append_file",
                    {"path": f"{H}/docs/notes.txt", "content": "copied\n"},
                    ok(
                        {
                            "op": "replace",
                            "path": _ptr(f"{H}/docs/notes.txt") + "/content",
                            "value": _text(NOTES) + "copied\n",
                        }
                    ),
                ),
            ],
            family="fs-copy",
            difficulty=1,
        ),
        t(
            "fs-version-report",
            f"Rename {REPORT} to {H}/docs/report-v1.md, then create a new {REPORT} holding "
            "'# Quarterly report' and a newline.",
            goal=every(is_file(f"{H}/docs/report-v1.md", _text(REPORT)), is_file(REPORT, "# Quarterly report\n")),
            subgoals={"kept": is_file(f"{H}/docs/report-v1.md")},
            golden=[
                ("mv", {"src": REPORT, "dst": f"{H}/docs/report-v1.md"}, ok(move(REPORT, f"{H}/docs/report-v1.md"))),
                (
                    "write_file",
                    {"path": REPORT, "content": "# Quarterly report\n"},
                    ok(add_file(REPORT, "# Quarterly report\n")),
                ),
            ],
            family="fs-move",
            difficulty=1,
        ),
        t(
            "fs-reset-logs",
            f"Empty the directory {H}/logs: remove it with everything in it and create it again.",
            goal=every(is_dir(f"{H}/logs"), gone(APP), gone(OLD)),
            subgoals={"app_gone": gone(APP)},
            golden=[
                ("rm", {"path": f"{H}/logs", "recursive": True}, ok(remove(APP), remove(OLD), remove(f"{H}/logs"))),
                ("mkdir", {"path": f"{H}/logs"}, ok(add_dir(f"{H}/logs"))),
            ],
            family="fs-remove",
            difficulty=1,
        ),
        t(
            "fs-two-files",
            "Create two empty files, /tmp/a.txt and /tmp/b.txt.",
            goal=every(is_file("/tmp/a.txt", ""), is_file("/tmp/b.txt", "")),
            subgoals={"a": is_file("/tmp/a.txt")},
            golden=[
                ("touch", {"path": "/tmp/a.txt"}, ok(add_file("/tmp/a.txt"))),
                ("touch", {"path": "/tmp/b.txt"}, ok(add_file("/tmp/b.txt"))),
            ],
            family="fs-create",
            difficulty=1,
        ),
        t(
            "fs-backup-hosts",
            f"Copy /etc/hosts to {H}/hosts.bak, then add the line '10.0.0.2 db' to /etc/hosts.",
            goal=every(
                is_file(f"{H}/hosts.bak", _text("/etc/hosts")),
                is_file("/etc/hosts", _text("/etc/hosts") + "10.0.0.2 db\n"),
            ),
            subgoals={"backed_up": is_file(f"{H}/hosts.bak")},
            golden=[
                (
                    "cp",
                    {"src": "/etc/hosts", "dst": f"{H}/hosts.bak"},
                    ok(add_file(f"{H}/hosts.bak", _text("/etc/hosts"))),
                ),
                (
                    "append_file",
                    {"path": "/etc/hosts", "content": "10.0.0.2 db\n"},
                    ok(
                        {
                            "op": "replace",
                            "path": _ptr("/etc/hosts") + "/content",
                            "value": _text("/etc/hosts") + "10.0.0.2 db\n",
                        }
                    ),
                ),
            ],
            family="fs-copy",
            difficulty=1,
        ),
        t(
            "fs-nested-dirs",
            f"Create {H}/src and inside it {H}/src/lib.",
            goal=is_dir(f"{H}/src/lib"),
            subgoals={"src": is_dir(f"{H}/src")},
            golden=[
                ("mkdir", {"path": f"{H}/src"}, ok(add_dir(f"{H}/src"))),
                ("mkdir", {"path": f"{H}/src/lib"}, ok(add_dir(f"{H}/src/lib"))),
            ],
            family="fs-create",
            difficulty=1,
        ),
        # -- level 2: read, then write what was read -------------------------------------------
        t(
            "fs-extract-errors",
            f"Write the ERROR lines of {APP}, in order, to {H}/errors.txt.",
            goal=is_file(f"{H}/errors.txt", errors),
            golden=[
                ("cat", {"path": APP}),
                ("write_file", {"path": f"{H}/errors.txt", "content": errors}, ok(add_file(f"{H}/errors.txt", errors))),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-count-errors",
            f"Count the lines of {APP} that contain ERROR and write the number and a newline to {H}/error_count.txt.",
            goal=is_file(f"{H}/error_count.txt", "2\n"),
            golden=[
                ("grep", {"pattern": "ERROR", "path": APP}, respond(errors)),
                (
                    "write_file",
                    {"path": f"{H}/error_count.txt", "content": "2\n"},
                    ok(add_file(f"{H}/error_count.txt", "2\n")),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-first-note",
            f"Write the first line of {NOTES} (with its newline) to {H}/first.txt.",
            goal=is_file(f"{H}/first.txt", _head(NOTES, 1)),
            golden=[
                ("head", {"path": NOTES, "lines": 1}, respond(_head(NOTES, 1))),
                (
                    "write_file",
                    {"path": f"{H}/first.txt", "content": _head(NOTES, 1)},
                    ok(add_file(f"{H}/first.txt", _head(NOTES, 1))),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-index-docs",
            f"Write the listing of {H}/docs (as ls prints it) and a newline to {H}/docs-index.txt.",
            goal=is_file(f"{H}/docs-index.txt", "report.md\n"),
            golden=[
                ("ls", {"path": f"{H}/docs"}),
                (
                    "write_file",
                    {"path": f"{H}/docs-index.txt", "content": "report.md\n"},
                    ok(add_file(f"{H}/docs-index.txt", "report.md\n")),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-count-lines",
            f"Find how many lines {NOTES} has and write that number and a newline to {H}/lines.txt.",
            goal=is_file(f"{H}/lines.txt", f"{len(_text(NOTES).splitlines())}\n"),
            golden=[
                ("wc", {"path": NOTES}, respond(_wc(NOTES))),
                (
                    "write_file",
                    {"path": f"{H}/lines.txt", "content": f"{len(_text(NOTES).splitlines())}\n"},
                    ok(add_file(f"{H}/lines.txt", f"{len(_text(NOTES).splitlines())}\n")),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-list-logs",
            f"Write the paths of every .log file under {H}, one per line, sorted, to {H}/logs.txt.",
            goal=is_file(f"{H}/logs.txt", _find(H, "*.log")),
            golden=[
                ("find", {"path": H, "name": "*.log"}, respond(_find(H, "*.log"))),
                (
                    "write_file",
                    {"path": f"{H}/logs.txt", "content": _find(H, "*.log")},
                    ok(add_file(f"{H}/logs.txt", _find(H, "*.log"))),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-report-title",
            f"Write the title line of {REPORT} (its first line, with the newline) to {H}/title.txt.",
            goal=is_file(f"{H}/title.txt", _head(REPORT, 1)),
            golden=[
                ("cat", {"path": REPORT}),
                (
                    "write_file",
                    {"path": f"{H}/title.txt", "content": _head(REPORT, 1)},
                    ok(add_file(f"{H}/title.txt", _head(REPORT, 1))),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-copy-todo-upper",
            f"Read {TODO} and write its lines in upper case to {H}/TODO.txt.",
            goal=is_file(f"{H}/TODO.txt", _text(TODO).upper()),
            golden=[
                ("cat", {"path": TODO}),
                (
                    "write_file",
                    {"path": f"{H}/TODO.txt", "content": _text(TODO).upper()},
                    ok(add_file(f"{H}/TODO.txt", _text(TODO).upper())),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        # -- level 3: four or more commands -----------------------------------------------------
        t(
            "fs-archive-logs",
            f"Create {H}/archive, move both files of {H}/logs into it (same names), then remove the "
            "empty logs directory.",
            goal=every(
                is_file(f"{H}/archive/app.log", _text(APP)),
                is_file(f"{H}/archive/old.log", _text(OLD)),
                gone(f"{H}/logs"),
            ),
            subgoals={
                "archive": is_dir(f"{H}/archive"),
                "app": is_file(f"{H}/archive/app.log"),
                "old": is_file(f"{H}/archive/old.log"),
            },
            golden=[
                ("mkdir", {"path": f"{H}/archive"}, ok(add_dir(f"{H}/archive"))),
                ("mv", {"src": APP, "dst": f"{H}/archive/app.log"}, ok(move(APP, f"{H}/archive/app.log"))),
                ("mv", {"src": OLD, "dst": f"{H}/archive/old.log"}, ok(move(OLD, f"{H}/archive/old.log"))),
                ("rm", {"path": f"{H}/logs", "recursive": True}, ok(remove(f"{H}/logs"))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-scaffold-project",
            f"Create {H}/projects/demo (both directories), with README.md saying '# Demo' and "
            "main.py saying \"print('hi')\", each followed by a newline.",
            goal=every(
                is_file(f"{H}/projects/demo/README.md", "# Demo\n"),
                is_file(f"{H}/projects/demo/main.py", "print('hi')\n"),
            ),
            subgoals={
                "projects": is_dir(f"{H}/projects"),
                "demo": is_dir(f"{H}/projects/demo"),
                "readme": is_file(f"{H}/projects/demo/README.md"),
            },
            golden=[
                ("mkdir", {"path": f"{H}/projects"}, ok(add_dir(f"{H}/projects"))),
                ("mkdir", {"path": f"{H}/projects/demo"}, ok(add_dir(f"{H}/projects/demo"))),
                (
                    "write_file",
                    {"path": f"{H}/projects/demo/README.md", "content": "# Demo\n"},
                    ok(add_file(f"{H}/projects/demo/README.md", "# Demo\n")),
                ),
                (
                    "write_file",
                    {"path": f"{H}/projects/demo/main.py", "content": "print('hi')\n"},
                    ok(add_file(f"{H}/projects/demo/main.py", "print('hi')\n")),
                ),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-backup-texts",
            f"Create {H}/backup and copy notes.txt, todo.txt and docs/report.md of {H} into it (same file names).",
            goal=every(*(is_file(f"{H}/backup/{posixpath.basename(p)}", _text(p)) for p in (NOTES, TODO, REPORT))),
            subgoals={
                "dir": is_dir(f"{H}/backup"),
                "notes": is_file(f"{H}/backup/notes.txt"),
                "todo": is_file(f"{H}/backup/todo.txt"),
            },
            golden=[
                ("mkdir", {"path": f"{H}/backup"}, ok(add_dir(f"{H}/backup"))),
                *(
                    (
                        (
                            "cp",
                            {"src": p, "dst": f"{H}/backup/{posixpath.basename(p)}"},
                            ok(add_file(f"{H}/backup/{posixpath.basename(p)}", _text(p))),
                        )
                    )
                    for p in (NOTES, TODO, REPORT)
                ),
            ],
            family="fs-copy",
            difficulty=3,
        ),
        t(
            "fs-swap-files",
            f"Swap the contents of {NOTES} and {TODO} (use /tmp/swap.txt in between and leave nothing there).",
            goal=every(is_file(NOTES, _text(TODO)), is_file(TODO, _text(NOTES)), gone("/tmp/swap.txt")),
            subgoals={"notes_has_todo": is_file(NOTES, _text(TODO))},
            golden=[
                ("mv", {"src": NOTES, "dst": "/tmp/swap.txt"}, ok(move(NOTES, "/tmp/swap.txt"))),
                ("mv", {"src": TODO, "dst": NOTES}, ok(move(TODO, NOTES))),
                ("mv", {"src": "/tmp/swap.txt", "dst": TODO}, ok(move("/tmp/swap.txt", TODO))),
            ],
            family="fs-move",
            difficulty=3,
        ),
        t(
            "fs-errors-then-clean",
            f"Save the ERROR lines of {APP} to {H}/errors.txt, then delete {APP} and {OLD}.",
            goal=every(is_file(f"{H}/errors.txt", errors), gone(APP), gone(OLD)),
            subgoals={"saved": is_file(f"{H}/errors.txt", errors), "app_gone": gone(APP)},
            golden=[
                ("grep", {"pattern": "ERROR", "path": APP}, respond(errors)),
                ("write_file", {"path": f"{H}/errors.txt", "content": errors}, ok(add_file(f"{H}/errors.txt", errors))),
                ("rm", {"path": APP}, ok(remove(APP))),
                ("rm", {"path": OLD}, ok(remove(OLD))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-deep-file",
            f"Create {H}/a/b/c/deep.txt holding 'deep' and a newline (make the directories first).",
            goal=is_file(f"{H}/a/b/c/deep.txt", "deep\n"),
            subgoals={"a": is_dir(f"{H}/a"), "b": is_dir(f"{H}/a/b"), "c": is_dir(f"{H}/a/b/c")},
            golden=[
                ("mkdir", {"path": f"{H}/a"}, ok(add_dir(f"{H}/a"))),
                ("mkdir", {"path": f"{H}/a/b"}, ok(add_dir(f"{H}/a/b"))),
                ("mkdir", {"path": f"{H}/a/b/c"}, ok(add_dir(f"{H}/a/b/c"))),
                (
                    "write_file",
                    {"path": f"{H}/a/b/c/deep.txt", "content": "deep\n"},
                    ok(add_file(f"{H}/a/b/c/deep.txt", "deep\n")),
                ),
            ],
            family="fs-create",
            difficulty=3,
        ),
        t(
            "fs-done-list",
            f"Move every line of {TODO} to {H}/done.txt, each prefixed with 'done: ', then delete {TODO}.",
            goal=every(is_file(f"{H}/done.txt", "".join(f"done: {x}\n" for x in _text(TODO).splitlines())), gone(TODO)),
            subgoals={"written": is_file(f"{H}/done.txt")},
            golden=[
                ("cat", {"path": TODO}),
                (
                    "write_file",
                    {"path": f"{H}/done.txt", "content": "".join(f"done: {x}\n" for x in _text(TODO).splitlines())},
                    ok(add_file(f"{H}/done.txt", "".join(f"done: {x}\n" for x in _text(TODO).splitlines()))),
                ),
                ("rm", {"path": TODO}, ok(remove(TODO))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-tidy-tmp",
            "Tidy /tmp: delete scratch.txt, create an empty /tmp/.keep and a directory /tmp/cache.",
            goal=every(gone("/tmp/scratch.txt"), is_file("/tmp/.keep", ""), is_dir("/tmp/cache")),
            subgoals={"scratch_gone": gone("/tmp/scratch.txt"), "keep": is_file("/tmp/.keep")},
            golden=[
                ("ls", {"path": "/tmp"}),
                ("rm", {"path": "/tmp/scratch.txt"}, ok(remove("/tmp/scratch.txt"))),
                ("touch", {"path": "/tmp/.keep"}, ok(add_file("/tmp/.keep"))),
                ("mkdir", {"path": "/tmp/cache"}, ok(add_dir("/tmp/cache"))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
    ]
