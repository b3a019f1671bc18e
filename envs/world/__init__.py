"""The LLM-emulated world: tools answered by a language model, state owned by the env.

    import agentenv
    env = agentenv.make("world-fs-v0")     # or "world-bank-v0"; the scripted model by default
    env = agentenv.make("world-fs-v0", model=OpenAIWorldModel("http://127.0.0.1:8000/v1", "qwen"),
                        cache="runs/world-cache.sqlite")

A world (`World`, world.py; or a YAML/JSON spec, spec.py) is a typed state, tools
with the paths each may write, invariants and tasks with JSON Logic goals. A
`WorldModel` (models.py, openai_model.py, transformers_model.py) proposes each
emulated call's observation and RFC 6902 patch; the env (env.py) counts it only
after validation (validate.py), caches it (cache.py) and counts what happened
(metrics.py). The shipped worlds are in ``worlds/``; `propose_world` (proposer.py)
drafts new ones. See docs/world.md. Nothing starts at import.
"""

from agentenv.envs.world.cache import WorldCache
from agentenv.envs.world.env import WorldEnv, WorldEnvState, load_world, oracle
from agentenv.envs.world.metrics import WorldMetrics, world_metrics
from agentenv.envs.world.models import ScriptedWorldModel, WorldModel, WorldModelError
from agentenv.envs.world.openai_model import OpenAIWorldModel
from agentenv.envs.world.predicates import Predicate, PredicateError, rule_predicate
from agentenv.envs.world.prompt import WorldRequest
from agentenv.envs.world.proposer import Draft, propose_world
from agentenv.envs.world.schema import JSONSchemaState, ModelState
from agentenv.envs.world.spec import WorldSpec, load_spec
from agentenv.envs.world.transformers_model import TransformersWorldModel
from agentenv.envs.world.validate import REJECTION_KINDS, Accepted, Rejected
from agentenv.envs.world.world import Args, Response, World, WorldTool, respond, world_task

__all__ = [
    "REJECTION_KINDS",
    "Accepted",
    "Args",
    "Draft",
    "JSONSchemaState",
    "ModelState",
    "OpenAIWorldModel",
    "Predicate",
    "PredicateError",
    "Rejected",
    "Response",
    "ScriptedWorldModel",
    "TransformersWorldModel",
    "World",
    "WorldCache",
    "WorldEnv",
    "WorldEnvState",
    "WorldMetrics",
    "WorldModel",
    "WorldModelError",
    "WorldRequest",
    "WorldSpec",
    "WorldTool",
    "load_spec",
    "load_world",
    "oracle",
    "propose_world",
    "respond",
    "rule_predicate",
    "world_metrics",
    "world_task",
]
