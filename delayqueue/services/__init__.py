"""The read/act API the admin (and any other front end) stands on: ``operations`` acts on
jobs and queues through the engine's transitions; ``browse``, ``dashboard`` and
``job_detail`` read what Redis holds, showing any data, however corrupt, through
``display``. The engine and the worker never use this package."""
