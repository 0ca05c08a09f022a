"""The Lua scripts, one per state transition, registered once per Redis client and run by SHA."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from redis import Redis
from redis.commands.core import Script

INCLUDE = re.compile(r"^-- #include (_\w+)\.lua$", re.MULTILINE)
# A helper: "local function name(" at the start of a line, lines that are indented, empty or
# comments, then "end" alone on a line (a definition of another shape is always kept).
HELPER = re.compile(r"^local function (\w+)\([^\n]*\n(?:(?:[ \t][^\n]*|--[^\n]*)?\n)*?end\n?", re.M)


@cache
def load_source(name: str) -> str:
    """A script's source, with each ``-- #include _name.lua`` line replaced by that file
    (the helpers several transitions share). Includes may include others; each file is
    included once, where it is first named, so a later line naming it again is left out.

    A transition's source leaves out the helpers it never names (nor does a helper it keeps):
    Redis keeps nothing from one call of a script to the next, so every call runs each
    definition again, and one it does not use costs each call its closure (the includes'
    definitions were most of enqueue's Lua time once they held the limits' helpers)."""
    source = _expand(name, set())
    return source if name.startswith("_") else _without_unused(source)


def _without_unused(source: str) -> str:
    helpers = list(HELPER.finditer(source))
    names = {helper.group(1) for helper in helpers}
    outside = HELPER.sub("", source)
    needed = _names(outside) & names  # what the script itself names...
    calls = {h.group(1): _names(h.group(0)) & names - {h.group(1)} for h in helpers}
    todo = list(needed)
    while todo:  # ...and what those helpers name, and so on
        for name in calls[todo.pop()] - needed:
            needed.add(name)
            todo.append(name)
    return HELPER.sub(lambda h: h.group(0) if h.group(1) in needed else "", source)


def _names(source: str) -> set[str]:
    return set(re.findall(r"\w+", _code(source)))


def _code(source: str) -> str:
    """``source`` without its comments (what names a helper in a comment does not use it);
    a "--" inside a quoted string is kept, with what follows it."""
    lines = []
    for line in source.split("\n"):
        at = line.find("--")
        while at >= 0 and (line.count("'", 0, at) % 2 or line.count('"', 0, at) % 2):
            at = line.find("--", at + 2)
        lines.append(line if at < 0 else line[:at])
    return "\n".join(lines)


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
