"""The shipped worlds: ``fs`` (a Unix-like file system, hybrid: Python) and ``bank``
(a bank's back office, all emulated: a YAML spec, ``bank.yaml``)."""
