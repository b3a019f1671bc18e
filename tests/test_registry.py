import subprocess
import sys
import textwrap

import gymnasium
import pytest

import agentenv
from agentenv import UnknownEnvError
from tests.toy_envs import CounterEnv


@pytest.fixture
def clean_registry():
    before = dict(agentenv.registry._registry)
    yield
    for key in set(agentenv.registry._registry) - set(before):
        del agentenv.registry._registry[key]
        gymnasium.registry.pop(f"agentenv/{key}", None)


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


@pytest.mark.parametrize("bad", ["counter", "Counter v0", "-x-v0"])
def test_ids_must_be_versioned(bad):
    with pytest.raises(ValueError, match="name-v0"):
        agentenv.register(bad, CounterEnv)


def test_unknown_id_has_did_you_mean():
    with pytest.raises(UnknownEnvError, match="Did you mean 'arithmetic-v0'") as info:
        agentenv.make("arithmetc-v0")
    assert "Traceback" not in str(info.value)


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
    (dist / "entry_points.txt").write_text("[agentenv.envs]\necho-v0 = thirdparty_envs:EchoEnv\n")
    code = "import agentenv; print(type(agentenv.make('echo-v0')).__name__, agentenv.spec('echo-v0').description)"
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "EchoEnv from thirdparty-envs"
