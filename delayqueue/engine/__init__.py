"""The engine: the only code that knows Redis key names, Lua scripts and their arguments.

``keys`` names every key; ``transitions`` has one typed function per Lua script (``lua/``);
``clients`` makes the Redis clients and runs script calls; ``packing`` reads and writes the
packed spec of a never-claimed job. It imports neither the worker, the admin nor the
read/act API (import-linter contracts in pyproject.toml).
"""
