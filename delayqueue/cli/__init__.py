"""``manage.py delayqueue``: the operator's command line. The command module only parses
arguments; ``status`` reads (queues, workers, health, where a job is), ``render`` turns what
was read into tables, text and JSON, and ``acts`` plans each action (what it would touch, the
question to confirm) and runs it through ``delayqueue.services.operations``.

Exit codes: ``OK`` 0, ``FAILED`` 1 (Redis unreachable, a job or queue not in the state the
action needs, unhealthy, declined at the prompt), ``USAGE`` 2 (bad arguments: a malformed job
id or queue name, an unknown queue, confirmation needed without a terminal)."""

OK, FAILED, USAGE = 0, 1, 2
