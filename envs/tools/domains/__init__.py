"""Built-in domains of the tools env: ``retail`` (orders, returns) and ``calendar`` (room booking)."""
