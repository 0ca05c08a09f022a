"""Secrets out of what the admin shows: a Redis URL's password in every form it can take.

A URL may carry its password as userinfo (``redis://user:pw@host``), as a query parameter
(``?password=pw``, ``?sentinel_password=pw``, any parameter whose name looks secret) and,
for Sentinel, several times over, once per host (``sentinel://:pw@h1;sentinel://:pw@h2``).
``redact`` rewrites every URL in a message and then removes every secret of the configured
URLs wherever else it appears (an error that quotes an AUTH, say).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"
SECRET_NAME = re.compile(r"pass|pwd|secret|token|auth|key|cred|sig", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_SHORTEST_SCRUBBED = 3  # shorter secrets would blank out ordinary words of the message


def redact_url(url: str) -> str:
    """``url`` with its userinfo and every secret-looking query value replaced by ***;
    each part of a ``;``-separated list of URLs alike."""
    return ";".join(_redact_one(part) for part in url.split(";"))


def _split(url: str) -> tuple[str, str, str, str]:
    """(scheme and ``://``, userinfo, rest of the authority and path, ``?`` and query)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    head, mark, query = rest.partition("?")
    userinfo, at, host = head.rpartition("@")
    return scheme + sep, userinfo if at else "", host, mark + query


def _redact_one(url: str) -> str:
    scheme, userinfo, host, query = _split(url)
    shown = scheme + (f"{HIDDEN}@" if userinfo else "") + host
    if query:
        pairs = []
        for pair in query[1:].split("&"):
            name, eq, _ = pair.partition("=")
            pairs.append(f"{name}={HIDDEN}" if eq and SECRET_NAME.search(name) else pair)
        shown += "?" + "&".join(pairs)
    return shown


def secrets_of(url: str) -> set[str]:
    """The secrets a URL (or ``;``-separated list of URLs) holds, raw and percent-decoded."""
    found: set[str] = set()
    for part in url.split(";"):
        _, userinfo, _, query = _split(part)
        if userinfo:
            user, colon, password = userinfo.partition(":")
            found.add(password if colon else user)
            found.add(userinfo)
        for pair in query[1:].split("&"):
            name, eq, value = pair.partition("=")
            if eq and value and SECRET_NAME.search(name):
                found.add(value)
    return {form for secret in found for form in (secret, unquote(secret)) if form}


def redact(message: str, *urls: str) -> str:
    """``message`` with every URL in it redacted and no secret of ``urls`` left anywhere."""
    message = _URL.sub(lambda match: redact_url(match.group(0)), message)
    for url in urls:
        for secret in sorted(secrets_of(url), key=len, reverse=True):
            if len(secret) >= _SHORTEST_SCRUBBED:
                message = message.replace(secret, HIDDEN)
    return message
