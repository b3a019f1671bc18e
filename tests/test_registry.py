import re
import subprocess
import sys
import textwrap

import gymnasium
import pytest

import agentenv
from agentenv import EnvArgumentError, ScriptedPolicy, UnknownEnvError, tool_call_text
from agentenv.registry import resolve
from tests.toy_envs import CounterEnv


@pytest.fixture
def clean_registry():
    registry = agentenv.registry
    before = dict(registry._registry)
    yield
    for key in set(registry._registry) - set(before):
        del registry._registry[key]
        if registry._gym_id(key) in registry._gym_ids:
            registry._gym_ids.discard(registry._gym_id(key))
            gymnasium.registry.pop(registry._gym_id(key), None)
    registry._called.clear()


def test_builtins_are_registered():
    ids = [s.id for s in agentenv.envs_list()]
    assert {"arithmetic-v0", "guess-number-v0"} <= set(ids) and ids == sorted(ids)
    assert agentenv.list is agentenv.envs_list


def test_register_make_spec_with_defaults_and_overrides(clean_registry):
    agentenv.register("counter-v0", CounterEnv, description="toy", max_turns=3)
    assert agentenv.spec("counter-v0").description == "toy"
    assert agentenv.make("counter-v0").max_turns == 3
    assert agentenv.make("counter-v0", max_turns=4).max_turns == 4
    assert gymnasium.make("agentenv/counter-v0").unwrapped.max_turns == 3
    with pytest.raises(ValueError, match="already registered"):
        agentenv.register("counter-v0", CounterEnv)
    agentenv.register("counter-v0", CounterEnv, override=True)


def test_entry_point_must_return_an_env(clean_registry):
    agentenv.register("notenv-v0", lambda: object())
    with pytest.raises(TypeError, match=r"expected an agentenv\.Env"):
        agentenv.make("notenv-v0")


def test_third_party_packages_register_through_entry_points(tmp_path):
    (tmp_path / "thirdparty_envs.py").write_text(
        textwrap.dedent("""
        from agentenv import Env, tool

        class EchoEnv(Env):
            @tool(terminal=True)
            def echo(self, text: str) -> str:
                '''Echo text.'''
                return text
    """)
    )
    dist = tmp_path / "thirdparty_envs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-envs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[agentenv.envs]\necho-v0 = thirdparty_envs:EchoEnv\nthirdparty/echo-v1 = thirdparty_envs:EchoEnv\n"
    )
    code = (
        "import agentenv; print(type(agentenv.make('echo-v0')).__name__, agentenv.spec('echo-v0').description);"
        "print(type(agentenv.make('thirdparty/echo-v1')).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, check=True
    ).stdout
    assert out.split("\n")[:2] == ["EchoEnv from thirdparty-envs", "EchoEnv"]


@pytest.mark.parametrize("bad", ["counter", "Counter v0", "-x-v0", "a/b/c-v0", "/x-v0", "team/counter", "te am/x-v0"])
def test_ids_must_be_versioned(bad):
    with pytest.raises(ValueError, match="name-v0"):
        agentenv.register(bad, CounterEnv)


def test_ids_may_carry_a_namespace(clean_registry):
    agentenv.register("team/Counter-v0", CounterEnv, max_turns=2)
    assert agentenv.spec("team/Counter-v0").id == "team/Counter-v0"
    assert agentenv.make("team/Counter-v0").max_turns == 2
    assert "team/Counter-v0" in [s.id for s in agentenv.envs_list()]
    assert gymnasium.make("team/Counter-v0").unwrapped.max_turns == 2  # its own namespace in gymnasium too
    with pytest.raises(UnknownEnvError, match="Did you mean 'team/Counter-v0'"):
        agentenv.make("Counter-v0")
    gymnasium.register("phys/CartPole-v1", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        with pytest.raises(ValueError, match="gymnasium already has an env 'phys/CartPole-v1'"):
            agentenv.register("phys/CartPole-v1", CounterEnv)
    finally:
        gymnasium.registry.pop("phys/CartPole-v1")


def test_a_misspelt_env_argument_fails_in_one_line_with_a_did_you_mean(clean_registry):
    with pytest.raises(EnvArgumentError, match=r"takes no argument 'max_turn'\. Did you mean 'max_turns'\?$"):
        agentenv.make("guess-number-v0", max_turn=3)
    with pytest.raises(TypeError, match=r"'bogus'\. It takes: count, difficulties, .*max_turns, parser"):
        agentenv.make("arithmetic-v0", bogus=1)  # also a TypeError, as Python's own would be
    agentenv.register("typo-v0", "agentenv.envs.guess_number:GuessNumberEnv", dificulties=[0])
    with pytest.raises(EnvArgumentError, match=r"'dificulties' \(a registered default\)\. Did you mean 'difficulties'"):
        agentenv.make("typo-v0")
    assert agentenv.make("guess-number-v0", difficulties=[0], max_turns=3).max_turns == 3  # subclass + Env.__init__


def test_factories_taking_any_keyword_are_not_second_guessed(clean_registry):
    agentenv.register("anykw-v0", lambda **kwargs: CounterEnv(max_turns=kwargs.get("turns", 5)))
    assert agentenv.make("anykw-v0", turns=2).max_turns == 2


def test_unknown_id_has_did_you_mean():
    with pytest.raises(UnknownEnvError, match="Did you mean 'arithmetic-v0'") as info:
        agentenv.make("arithmetc-v0")
    assert "Traceback" not in str(info.value)


# -- code as env ids: module:Class, module:register_fn ------------------------------------

ENVS_MODULE = '''
import agentenv
from tests.toy_envs import CounterEnv

class ShortCounter(CounterEnv):
    """A counter with three turns."""
    max_turns = 3

def register_one():
    agentenv.register("my-team/counter-v0", CounterEnv, oracle="agentenv.envs.arithmetic:oracle", max_turns=4)

def register_two():
    agentenv.register("my-team/a-v0", CounterEnv)
    agentenv.register("my-team/b-v0", ShortCounter)

def make_one():
    return CounterEnv()

agentenv.register("my-team/at-import-v0", ShortCounter, override=True)
LIMIT = 3
'''


@pytest.fixture
def envs_module(tmp_path, monkeypatch, clean_registry):
    """A module on sys.path with an env class, register functions and a registration at import."""
    (tmp_path / "my_team_envs.py").write_text(ENVS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_team_envs"
    sys.modules.pop("my_team_envs", None)


def test_an_env_class_is_an_env_id(envs_module):
    assert resolve("my_team_envs:ShortCounter") == "my_team_envs:ShortCounter"
    env = agentenv.make("my_team_envs:ShortCounter")
    assert env.max_turns == 3
    assert agentenv.spec("my_team_envs:ShortCounter").description == "A counter with three turns."
    [traj] = agentenv.rollout("my_team_envs:ShortCounter", ScriptedPolicy.replay([tool_call_text("submit")]), n=1)
    assert traj.env_id == "my_team_envs:ShortCounter" and traj.failure == "policy"
    with pytest.raises(EnvArgumentError, match="Did you mean 'max_turns'"):
        agentenv.make("my_team_envs:ShortCounter", max_trns=2)


def test_a_register_function_gives_the_env_it_registered(envs_module):
    assert resolve("my_team_envs:register_one") == "my-team/counter-v0"
    assert resolve("my_team_envs:register_one") == "my-team/counter-v0"  # called once, remembered
    assert agentenv.make("my_team_envs:register_one").max_turns == 4
    assert agentenv.spec("my_team_envs:register_one").oracle == "agentenv.envs.arithmetic:oracle"
    with pytest.raises(UnknownEnvError, match=r"registered 2 envs .*e\.g\. 'my_team_envs:register_two:my-team/a-v0'"):
        resolve("my_team_envs:register_two")
    assert resolve("my_team_envs:register_two:my-team/b-v0") == "my-team/b-v0"
    with pytest.raises(UnknownEnvError, match=r"registered no env 'my-team/c-v0'\. Did you mean"):
        resolve("my_team_envs:register_two:my-team/c-v0")
    assert resolve("my_team_envs:my-team/at-import-v0") == "my-team/at-import-v0"  # gymnasium's module:ID


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:Env", "no module 'no_such_module_xyz' to import"),
        ("my_team_envs:ShortCountr", "has no attribute 'ShortCountr'. Did you mean 'ShortCounter'"),
        ("my_team_envs:LIMIT", "'my_team_envs:LIMIT' is 3 (int); expected an agentenv.Env subclass"),
        ("my_team_envs:make_one", "returned an env: point at the Env class instead"),
        ("my_team_envs:not-here-v0", "registered no env 'not-here-v0'"),
    ],
)
def test_code_that_names_no_env_fails_in_one_line(envs_module, name, message):
    with pytest.raises(UnknownEnvError, match=re.escape(message)) as info:
        resolve(name)
    assert "\n" not in str(info.value)


@pytest.fixture
def clean_namespaces(clean_registry):
    registry = agentenv.registry
    before = dict(registry._namespaces)
    yield
    registry._namespaces.clear()
    registry._namespaces.update(before)
    registry._namespaces_loaded.intersection_update(before)


def register_toy_namespace() -> None:
    for name in ("alpha", "beta"):
        agentenv.register(f"toys/{name}-v0", CounterEnv, description=f"toy {name}")


def test_a_namespace_registers_its_ids_on_first_lookup_and_lists_them(clean_namespaces):
    agentenv.register_namespace("toys", f"{__name__}:register_toy_namespace", requires="json", extra="toys")
    assert "toys/alpha-v0" not in agentenv.registry._registry  # nothing imported or registered yet
    assert agentenv.spec("toys/beta-v0").description == "toy beta"
    with pytest.raises(UnknownEnvError, match="Did you mean 'toys/alpha-v0'"):
        agentenv.spec("toys/alpa-v0")
    assert {"toys/alpha-v0", "toys/beta-v0"} <= {s.id for s in agentenv.envs_list()}


def test_a_namespace_whose_library_is_missing_names_the_extra_and_is_left_out_of_the_list(clean_namespaces):
    agentenv.register_namespace(
        "ghosts", f"{__name__}:register_toy_namespace", requires="no_such_lib_xyz", extra="ghosts"
    )
    with pytest.raises(UnknownEnvError, match=r"pip install 'agentenv\[ghosts\]'"):
        agentenv.make("ghosts/any-v0")
    assert not [s for s in agentenv.envs_list() if s.id.startswith("ghosts/")]
    with pytest.raises(ValueError, match="no slash"):
        agentenv.register_namespace("a/b", "m:f", requires="json", extra="x")


def why_not_toy(env_id: str) -> str | None:
    return "it is left out on purpose" if env_id == "toys/gone-v0" else None


def test_a_namespace_may_say_why_an_id_is_not_offered(clean_namespaces):
    agentenv.register_namespace(
        "toys", f"{__name__}:register_toy_namespace", requires="json", extra="toys", explain=f"{__name__}:why_not_toy"
    )
    with pytest.raises(UnknownEnvError, match="'toys/gone-v0': it is left out on purpose"):
        agentenv.make("toys/gone-v0")
    with pytest.raises(UnknownEnvError, match="Did you mean 'toys/alpha-v0'"):
        agentenv.make("toys/alpah-v0")
