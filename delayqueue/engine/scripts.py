"""The Lua scripts, one per state transition, registered once per Redis client and run by SHA."""

from __future__ import annotations

import re
from importlib.resources import files

from redis import Redis
from redis.commands.core import Script

INCLUDE = re.compile(r"^-- #include (_\w+)\.lua$", re.MULTILINE)


def load_source(name: str) -> str:
    """A script's source, with each ``-- #include _name.lua`` line replaced by that file
    (the helpers several transitions share). Includes may include others; each file is
    included once, where it is first named, so a later line naming it again is left out."""
    return _expand(name, set())


def _expand(name: str, included: set[str]) -> str:
    source = files("delayqueue.engine").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        helper = match.group(1)
        if helper in included:
            return f"-- ({helper}.lua: included above)"
        included.add(helper)
        return _expand(helper, included)

    return INCLUDE.sub(include, source)


class Scripts:
    """The registered scripts of one client. See each ``lua/<name>.lua`` for KEYS/ARGV."""

    def __init__(self, client: Redis) -> None:
        self.enqueue: Script = client.register_script(load_source("enqueue"))
        self.cancel: Script = client.register_script(load_source("cancel"))
        self.reschedule: Script = client.register_script(load_source("reschedule"))
        self.claim: Script = client.register_script(load_source("claim"))
        self.begin: Script = client.register_script(load_source("begin"))
        self.ack: Script = client.register_script(load_source("ack"))
        self.fail: Script = client.register_script(load_source("fail"))
        self.reap: Script = client.register_script(load_source("reap"))
        self.release: Script = client.register_script(load_source("release"))
        self.bury: Script = client.register_script(load_source("bury"))
        self.requeue: Script = client.register_script(load_source("requeue"))
        self.purge: Script = client.register_script(load_source("purge"))
        self.pause: Script = client.register_script(load_source("pause"))
        self.resume: Script = client.register_script(load_source("resume"))
        self.plan_schedule: Script = client.register_script(load_source("plan_schedule"))
        self.fire: Script = client.register_script(load_source("fire"))
        self.unplan_schedule: Script = client.register_script(load_source("unplan_schedule"))
        self.task_started: Script = client.register_script(load_source("task_started"))
        self.task_finished: Script = client.register_script(load_source("task_finished"))

    def __getitem__(self, name: str) -> Script:
        script: Script = getattr(self, name)
        return script
