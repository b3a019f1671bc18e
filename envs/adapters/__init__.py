"""Adapters: other projects' tasks, games and servers as agentenv envs.

One module per project, imported only when its env is made (the registry holds
``"module:Class"`` strings), so each heavy dependency loads on demand:

- `reasoning_gym`: reasoning-gym's procedural datasets, ``reasoning-gym/<name>-v0``,
  scored by its own ``score_answer`` in a subprocess (`_reasoning_gym_scorer`).
- `textarena_games`: TextArena's games, ``textarena/...``; `textarena_catalog` says which
  games are in, their ids, and why the others are left out.
- `qa`: ``qa-v0``, question-answer tasks from any Hugging Face ``datasets`` split;
  `_dataset` reads the split's records (``agentenv.envs.code.from_dataset`` shares it).
- `mcp`: the tools of any MCP server, and ``mcp-notes-v0``.

The env families built here (code, tools, browser, world) live beside this folder,
not in it.
"""
