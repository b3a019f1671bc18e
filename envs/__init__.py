"""Built-in environments, imported as ``agentenv.envs.<name>``.

Each module is imported only when its env is made (the registry holds
``"module:Class"`` strings), so heavy dependencies load on demand.
"""
