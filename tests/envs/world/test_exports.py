"""agentenv.envs.world's public API is what its __all__ says: pinned, so a change is deliberate."""

import subprocess
import sys
import textwrap

import agentenv.envs.world as world

PUBLIC = {
    "REJECTION_KINDS", "Accepted", "Args", "Draft", "JSONSchemaState", "ModelState", "OpenAIWorldModel",
    "Predicate", "PredicateError", "Rejected", "Response", "ScriptedWorldModel", "TransformersWorldModel",
    "World", "WorldCache", "WorldEnv", "WorldEnvState", "WorldMetrics", "WorldModel", "WorldModelError",
    "WorldRequest", "WorldSpec", "WorldTool", "load_spec", "load_world", "oracle", "propose_world", "respond",
    "rule_predicate", "world_metrics", "world_task",
}  # fmt: skip


def test_all_is_pinned_sorted_and_importable() -> None:
    assert set(world.__all__) == PUBLIC
    assert world.__all__ == sorted(world.__all__, key=lambda n: (not n.isupper(), n))
    assert all(hasattr(world, name) for name in world.__all__)


def test_importing_the_package_loads_no_heavy_or_optional_dependency() -> None:
    code = """
        import sys
        import agentenv.envs.world
        optional = ("torch", "transformers", "jsonpatch", "jsonschema", "datalogic_py")
        print(sorted(m for m in optional if m in sys.modules))
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
