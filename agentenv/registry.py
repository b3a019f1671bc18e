"""The env registry: `register`, `make`, `spec`, `envs_list`, and `resolve` for code.

Ids look like ``name-v0``, or ``namespace/name-v0`` for a team's or a package's
own envs (as gymnasium allows). Every registered id is also registered with
gymnasium: ``agentenv/<id>`` for a plain id, so ``gymnasium.make("agentenv/arithmetic-v0")``
works once agentenv is imported, and a namespaced id under its own namespace
(``gymnasium.make("team/name-v0")``).

An env that is code rather than a registered id is named ``module:attr``, where
the command line and training configs take an env id (`resolve` explains the forms):
``mypkg.envs:MyEnv`` (an `Env` subclass) or ``mypkg.envs:register`` (a function
that registers envs). Third-party packages register through the entry-point group
``agentenv.envs``: the entry point's name is the env id and its value the factory
(``"mypkg.envs:MyEnv"``); they are read lazily, the first time an id is looked up.

Keyword arguments for an env (given to `make`, or registered as defaults) are
checked against its constructor before it is built: a misspelt one fails in one
line with a did-you-mean (`EnvArgumentError`), not deep inside the env.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from agentenv.core.errors import EnvArgumentError, UnknownEnvError
from agentenv.core.task import did_you_mean

__all__ = ["EnvSpec", "envs_list", "make", "register", "register_namespace", "resolve", "spec"]

ENTRY_POINT_GROUP = "agentenv.envs"
_ID_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*-v\d+$")


@dataclass(frozen=True, slots=True)
class EnvSpec:
    """A registered env: its id, the factory that builds it and the defaults it is built with."""

    id: str
    entry_point: str | Callable[..., Any]
    """The factory: a callable, or ``"module:attribute"`` imported when first needed."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments the factory gets unless `make` overrides them."""
    description: str = ""
    oracle: str | Callable[..., Any] | None = None
    """A factory of a `ScriptedPolicy` that solves the env's tasks, if it has one."""
    needs: str | None = None
    """What ``make(id)`` needs besides the registered defaults, said to a user (``"config=
    {'datasets': [...]}: the datasets to mix"``); None when ``make(id)`` alone makes an env
    that resets. `agentenv list` shows an id with needs as not ready, and what it needs."""

    def make(self, **kwargs: Any) -> Any:
        """A new env: the registered defaults, overridden by ``kwargs`` (checked first)."""
        from agentenv.core.env import Env

        factory = _load(self.entry_point)
        self._check_kwargs(factory, kwargs)
        env = factory(**{**self.kwargs, **kwargs})
        if not isinstance(env, Env):
            raise TypeError(f"entry point of {self.id!r} returned {type(env).__name__}, expected an agentenv.Env")
        return env

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """`EnvArgumentError`, with a did-you-mean, for a name in ``kwargs`` (or in the
        registered defaults) that the entry point does not take. Only names are
        checked; the env validates the values. Imports the entry point."""
        self._check_kwargs(_load(self.entry_point), kwargs)

    def _check_kwargs(self, factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
        names = {**self.kwargs, **kwargs}
        accepted = _accepted_kwargs(factory) if names else None
        if accepted is None:
            return
        for name in names:
            if name not in accepted:
                hint = did_you_mean(name, accepted) or f" It takes: {', '.join(sorted(accepted)) or 'nothing'}."
                where = "" if name in kwargs else " (a registered default)"
                what = getattr(factory, "__qualname__", type(factory).__name__)
                raise EnvArgumentError(f"env {self.id!r} ({what}) takes no argument {name!r}{where}.{hint}")

    def make_oracle(self) -> Any:
        if self.oracle is None:
            raise ValueError(f"env {self.id!r} has no scripted oracle; use another policy")
        return _load(self.oracle)()


_registry: dict[str, EnvSpec] = {}
_plugins_loaded = False
_gym_ids: set[str] = set()
"""The gymnasium ids this registry made (only these are replaced on re-registration)."""
_lock = threading.RLock()
_recordings: list[list[str]] = []
"""While `resolve` runs a register function: the ids it registers."""
_called: dict[str, list[str]] = {}
"""``module:function`` -> the ids that register function registered (each is called once)."""


@dataclass(frozen=True, slots=True)
class _Namespace:
    loader: str
    """``module:function`` that registers every id of the namespace."""
    requires: str
    """The top-level module the loader needs (a third-party library)."""
    extra: str
    """The pip extra that installs it."""
    description: str
    explain: str | None
    """``module:function`` giving why an id of the namespace is not registered (or None)."""


_namespaces: dict[str, _Namespace] = {}
_namespaces_loaded: set[str] = set()


def register_namespace(
    namespace: str, loader: str, *, requires: str, extra: str, description: str = "", explain: str | None = None
) -> None:
    """Declare a namespace of ids that ``loader`` (``"module:function"``) registers on
    first use: when an id ``namespace/...`` is looked up, or `envs_list` runs.

    For adapters whose ids come from another library's registry (a dataset or game per
    id): ``import agentenv`` stays light, and an id asked for without the library
    installed fails in one line naming the extra (``pip install 'agentenv[EXTRA]'``).
    ``explain`` (``"module:function"``, called with an unknown id of the namespace) may
    say why that id is not offered, e.g. a game the adapter leaves out and the reason."""
    if "/" in namespace or not _ID_RE.match(f"{namespace}/x-v0"):
        raise ValueError(f"a namespace looks like 'reasoning-gym' (no slash), got {namespace!r}")
    _namespaces[namespace] = _Namespace(loader, requires, extra, description, explain)
    _namespaces_loaded.discard(namespace)


def declared_namespaces() -> dict[str, str]:
    """Each declared namespace and its description (its ids are registered on first use)."""
    return {name: ns.description for name, ns in sorted(_namespaces.items())}


def register(
    id: str,
    entry_point: str | Callable[..., Any],
    *,
    description: str = "",
    oracle: str | Callable[..., Any] | None = None,
    override: bool = False,
    needs: str | None = None,
    **kwargs: Any,
) -> EnvSpec:
    """Register an env factory under ``id`` (``name-vN`` or ``namespace/name-vN``);
    ``kwargs`` are its defaults, checked against the factory when an env is made.
    ``needs``: what making it takes besides those defaults (`EnvSpec.needs`); leave it
    None only when ``make(id)`` alone makes an env that resets."""
    if not _ID_RE.match(id):
        raise ValueError(f"env id must look like 'name-v0' or 'namespace/name-v0', got {id!r}")
    if isinstance(entry_point, str) and ":" not in entry_point:
        raise ValueError(f"entry_point must be 'module:attribute' or a callable, got {entry_point!r}")
    if id in _registry and not override:
        raise ValueError(f"env {id!r} is already registered; pass override=True to replace it")
    gym_id = _gym_id(id)
    if "/" in id and gym_id in gymnasium.registry and gym_id not in _gym_ids:
        raise ValueError(f"gymnasium already has an env {gym_id!r}; register this one under another namespace")
    env_spec = EnvSpec(id, entry_point, dict(kwargs), description, oracle, needs)
    _registry[id] = env_spec
    gymnasium.registry.pop(gym_id, None)
    gymnasium.register(id=gym_id, entry_point=entry_point, kwargs=dict(kwargs))
    _gym_ids.add(gym_id)
    for recording in _recordings:
        recording.append(id)
    return env_spec


def resolve(name: str) -> str:
    """The registered id that ``name`` stands for, registering it first when it names code.

    ``name`` is one of:

    - a registered id (``arithmetic-v0``, ``team/name-v0``), a plugin's included: itself;
    - ``module:Class``, an `Env` subclass: registered under that very string, which is returned;
    - ``module:function``, a function that registers envs: called (once per process),
      and the id it registered is returned; when it registered several,
      ``module:function:ID`` picks one;
    - ``module:ID``: importing ``module`` registers ``ID`` (gymnasium's form).

    `UnknownEnvError` with a did-you-mean for anything else: an id nobody
    registered, a module that does not exist, an attribute it lacks. The training
    config's ``envs`` keys and the command line's ENV go through here; so do
    `spec` and `make`, so a resolved name can be used wherever an id can.
    """
    _load_plugins()
    if name in _registry:
        return name
    namespace = name.partition("/")[0] if "/" in name and ":" not in name else None
    if namespace in _namespaces:
        _load_namespace(namespace, strict=True)
        if name in _registry:
            return name
        explain = _namespaces[namespace].explain
        reason = _load(explain)(name) if explain is not None else None
        if reason:
            raise UnknownEnvError(f"no env registered as {name!r}: {reason}")
        own = [k for k in _registry if k.startswith(namespace + "/")]
        hint = did_you_mean(name, own) or f" It has {len(own)} ids; `agentenv list {namespace}` shows them."
        raise UnknownEnvError(f"no env registered as {name!r}.{hint}")
    if ":" not in name:
        hint = did_you_mean(name, _registry) or f" Registered: {', '.join(sorted(_registry)) or 'none'}."
        raise UnknownEnvError(f"no env registered as {name!r}.{hint}")
    with _lock:
        if name in _registry:
            return name
        return _resolve_code(name)


def spec(id: str) -> EnvSpec:
    """The spec of a registered env (``id`` may be any name `resolve` takes);
    `UnknownEnvError` with a did-you-mean otherwise."""
    found = _registry.get(id)
    return found if found is not None else _registry[resolve(id)]


def make(id: str, **kwargs: Any) -> Any:
    """A new env of ``id`` (any name `resolve` takes); ``kwargs`` override the
    registered defaults, and a name the env does not take is an `EnvArgumentError`."""
    return spec(id).make(**kwargs)


def envs_list(*, namespaces: bool = True) -> list[EnvSpec]:
    """Every registered env, sorted by id. With ``namespaces`` (the default), the ids of
    every declared namespace whose library is installed are registered first; a
    namespace whose library is missing is left out. An id whose `EnvSpec.needs` is None
    makes with its defaults and resets (tests/envs/test_every_listed_env.py checks each)."""
    _load_plugins()
    if namespaces:
        for name in list(_namespaces):
            _load_namespace(name, strict=False)
    return [_registry[k] for k in sorted(_registry)]


# -- internals ----------------------------------------------------------------------


def _load_namespace(namespace: str, *, strict: bool) -> None:
    """Run ``namespace``'s loader once. A missing library is an `UnknownEnvError`
    naming the extra when ``strict``, and leaves the namespace empty otherwise."""
    with _lock:
        if namespace in _namespaces_loaded:
            return
        ns = _namespaces[namespace]
        if importlib.util.find_spec(ns.requires) is None:
            if strict:
                raise UnknownEnvError(
                    f"{namespace}/... envs need the {ns.requires!r} package: pip install 'agentenv[{ns.extra}]'"
                )
            return
        _call_register_function(ns.loader, _load(ns.loader))
        _namespaces_loaded.add(namespace)


def _gym_id(id: str) -> str:
    return id if "/" in id else f"agentenv/{id}"


def _load(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(target):
        return target
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve_code(name: str) -> str:
    """`resolve` for ``module:...``; called with the lock held."""
    from agentenv.core.env import Env

    module_name, _, rest = name.partition(":")
    attr, _, pick = rest.partition(":")
    module = _import(module_name, name)
    if _ID_RE.match(attr) and not _is_attribute_path(attr):  # module:ID
        if attr not in _registry:
            hint = did_you_mean(attr, _registry)
            raise UnknownEnvError(f"importing {module_name!r} registered no env {attr!r}.{hint}")
        return attr
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            public = [n for n in dir(target) if not n.startswith("_")]
            raise UnknownEnvError(f"{name!r}: {module_name!r} has no attribute {part!r}.{did_you_mean(part, public)}")
        target = getattr(target, part)
    if isinstance(target, type) and issubclass(target, Env):
        if pick:
            raise UnknownEnvError(f"{name!r}: an Env class names one env; drop {':' + pick!r}")
        doc = (target.__doc__ or "").strip().splitlines()  # a class's own: __doc__ is not inherited
        _registry[name] = EnvSpec(name, target, description=doc[0] if doc else "")
        return name
    if not callable(target) or isinstance(target, type):
        what = f"class {target.__name__}" if isinstance(target, type) else f"{target!r:.60} ({type(target).__name__})"
        raise UnknownEnvError(
            f"{name!r} is {what}; expected an agentenv.Env subclass or a function that registers envs"
        )
    ids = _call_register_function(f"{module_name}:{attr}", target)
    if pick:
        if pick not in ids:
            raise UnknownEnvError(f"{module_name}:{attr} registered no env {pick!r}.{did_you_mean(pick, ids)}")
        return pick
    if len(ids) > 1:
        listed = ", ".join(repr(i) for i in ids)
        raise UnknownEnvError(f"{name} registered {len(ids)} envs ({listed}); name one, e.g. '{name}:{ids[0]}'")
    return ids[0]


def _import(module_name: str, name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        # Only a missing `module_name` is the caller's mistake; a module that fails to
        # import one of its own dependencies raises as it is.
        if e.name is None or not (module_name == e.name or module_name.startswith(e.name + ".")):
            raise
        raise UnknownEnvError(f"no env registered as {name!r}, and no module {module_name!r} to import") from None


def _is_attribute_path(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


def _call_register_function(key: str, function: Callable[..., Any]) -> list[str]:
    """The ids ``function`` registers, calling it the first time only."""
    if key in _called:
        return _called[key]
    from agentenv.core.env import Env

    recording: list[str] = []
    _recordings.append(recording)
    try:
        returned = function()
    finally:
        _recordings.remove(recording)
    if isinstance(returned, Env):
        returned.close()
        raise UnknownEnvError(
            f"{key} returned an env: point at the Env class instead, or at a function that calls agentenv.register"
        )
    if not recording:
        raise UnknownEnvError(f"{key} registered no env: a register function calls agentenv.register(id, ...)")
    _called[key] = list(dict.fromkeys(recording))
    return _called[key]


@functools.lru_cache(maxsize=256)
def _accepted_kwargs(factory: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword names ``factory`` takes; None when it takes any.

    For a class, each ``__init__`` up the MRO that has ``**kwargs`` is taken to pass
    them on to its parent's, as the built-in envs do; a plain function with
    ``**kwargs`` (or one without a signature) takes anything."""
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if isinstance(factory, type):
        inits, skip = [vars(k)["__init__"] for k in factory.__mro__ if "__init__" in vars(k)], 1  # skip self
    else:
        inits, skip = [factory], 0
    names: set[str] = set()
    for init in inits:
        if init is object.__init__:
            return None  # **kwargs all the way up: nothing to check against
        try:
            params = list(inspect.signature(init).parameters.values())
        except (TypeError, ValueError):  # a builtin or C callable
            return None
        names.update(p.name for p in params[skip:] if p.kind in keyword)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return frozenset(names)
    return None


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _registry:
            register(ep.name, ep.value, description=f"from {ep.dist.name if ep.dist else 'a plugin'}")


def _register_builtins() -> None:
    register(
        "arithmetic-v0",
        "agentenv.envs.arithmetic:ArithmeticEnv",
        description="Evaluate an integer expression one operation at a time with a calculator tool.",
        oracle="agentenv.envs.arithmetic:oracle",
    )
    register(
        "guess-number-v0",
        "agentenv.envs.guess_number:GuessNumberEnv",
        description="Find a secret number from higher/lower feedback.",
        oracle="agentenv.envs.guess_number:oracle",
    )
    register(
        "guess-number-opening-v0",
        "agentenv.envs.guess_number:opening_env",
        description="Guess 1..16 in 4 guesses, warm-started on an oracle that often wastes its first guess.",
        oracle="agentenv.envs.guess_number:mixed_oracle",
    )
    register(
        "retail-v0",
        "agentenv.envs.tools.env:ToolsEnv",
        description="Customer service for a shop through a real HTTP API over SQLite: cancel, change, return.",
        oracle="agentenv.envs.tools.env:oracle",
        domain="agentenv.envs.tools.domains.retail:DOMAIN",
    )
    register(
        "calendar-v0",
        "agentenv.envs.tools.env:ToolsEnv",
        description="Book, move and cancel meeting rooms through a real HTTP API over SQLite.",
        oracle="agentenv.envs.tools.env:oracle",
        domain="agentenv.envs.tools.domains.calendar:DOMAIN",
    )
    for name, what in (
        ("shop", "Shop on a web store: search, compare, fill a cart and check out with a validated address."),
        ("mail", "Use a webmail: find, read, reply to, label and archive messages."),
        ("booking", "Book, move and cancel meeting rooms through forms with validation."),
    ):
        register(
            f"browser-{name}-v0",
            "agentenv.envs.browser.env:BrowserEnv",
            description=f"{what} A real browser (Chromium) on a local app over SQLite.",
            oracle="agentenv.envs.browser.oracle:oracle",
            sites=f"agentenv.envs.browser.apps.{name}:SITE",
        )
    register(
        "browser-v0",
        "agentenv.envs.browser.env:BrowserEnv",
        description="Every browser site's tasks (shop, mail, booking) in one env: Chromium on local apps over SQLite.",
        oracle="agentenv.envs.browser.oracle:oracle",
        sites=[f"agentenv.envs.browser.apps.{name}:SITE" for name in ("shop", "mail", "booking")],
    )
    register(
        "world-fs-v0",
        "agentenv.envs.world.env:WorldEnv",
        description="A Unix-like shell whose commands a language model emulates (ls and cat in code), validated state.",
        oracle="agentenv.envs.world.env:oracle",
        world="agentenv.envs.world.worlds.fs:WORLD",
    )
    register(
        "world-bank-v0",
        "agentenv.envs.world.env:WorldEnv",
        description="A bank's back office, every tool emulated by a language model, from a YAML world spec.",
        oracle="agentenv.envs.world.env:oracle",
        world="agentenv.envs.world.worlds.bank:world",
    )
    register(
        "code-v0",
        "agentenv.envs.code:CodeEnv",
        description="Write, run and fix Python in a sandbox; hidden tests, run in a fresh sandbox, decide.",
        oracle="agentenv.envs.code:oracle",
    )
    register(
        "qa-v0",
        "agentenv.envs.adapters.qa:QAEnv",
        description="Answer a question in one reply, matched to a reference answer; any Hugging Face datasets split.",
        oracle="agentenv.envs.adapters.qa:oracle",
    )
    register_namespace(
        "reasoning-gym",
        "agentenv.envs.adapters.reasoning_gym:register_all",
        requires="reasoning_gym",
        extra="reasoning-gym",
        description="reasoning-gym's procedural datasets, one env per dataset, scored by its own score_answer.",
    )
    register_namespace(
        "textarena",
        "agentenv.envs.adapters.textarena_games:register_all",
        requires="textarena",
        extra="textarena",
        explain="agentenv.envs.adapters.textarena_catalog:why_not",
        description="TextArena's text games: single-player puzzles, and two-player games against a fixed opponent.",
    )
    register(
        "mcp-notes-v0",
        "agentenv.envs.adapters.mcp.notes:NotesEnv",
        description="Keep a notes store in order through a real MCP server's tools (stdio); needs the mcp extra.",
        oracle="agentenv.envs.adapters.mcp.notes:oracle",
    )


_register_builtins()
