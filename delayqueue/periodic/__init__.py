"""Recurring jobs with no beat and no leader: the schedules declared in code and settings
(``declare``, ``registry``), when their occurrences fall (``rules``: cron lines in an IANA
timezone, or a fixed period counted from the epoch), each occurrence's job id
(``identity``), and what a delay worker does to move a schedule on to its next occurrence
in the same atomic step that claims the current one (``planner``)."""
