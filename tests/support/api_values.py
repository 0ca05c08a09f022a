"""Hypothesis strategies for the fuzzing of the public API (tests/scheduling/test_fuzz_api.py):
the values a call's args and kwargs may hold, odd ones included, each with a safe repr
(a recipe builds the deep and self-referencing ones only when the call runs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st


@dataclass(frozen=True)
class Recipe:
    """A value too deep, too big or too self-referential to print: built at the call, shown
    by its label in a falsifying example."""

    label: str
    build: Callable[[], Any]

    def __repr__(self) -> str:
        return self.label


def deep_list(levels: int) -> list[Any]:
    top: list[Any] = []
    cur = top
    for _ in range(levels - 1):
        cur.append([])
        cur = cur[0]
    return top


def deep_dict(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    cur = top
    for _ in range(levels - 1):
        cur["a"] = {}
        cur = cur["a"]
    return top


def self_list() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def self_dict() -> dict[str, Any]:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    return loop


def build(value: Any) -> Any:
    """``value`` with its recipes built (one level into lists, tuples and dicts)."""
    if isinstance(value, Recipe):
        return value.build()
    if type(value) is list:
        return [build(v) for v in value]
    if type(value) is tuple:
        return tuple(build(v) for v in value)
    if type(value) is dict:
        return {build(k): build(v) for k, v in value.items()}
    return value


def recipe(label: str, make: Callable[[], Any]) -> Recipe:
    return Recipe(label, make)


def _deep(levels: int, make: Callable[[int], Any]) -> Recipe:
    return Recipe(f"{make.__name__}({levels})", lambda: make(levels))


BIG_RECIPES = [
    *[_deep(n, deep_list) for n in (2, 50, 200, 500, 900, 960, 985, 1000, 2000, 5000)],
    *[_deep(n, deep_dict) for n in (100, 500, 985, 2000)],
    recipe("self_list()", self_list),
    recipe("self_dict()", self_dict),
    recipe("[1, self_list()]", lambda: [1, self_list()]),
    recipe("10**5000", lambda: 10**5000),
    recipe("-(10**5000)", lambda: -(10**5000)),
    recipe("10**4299", lambda: 10**4299),
    recipe("2**64", lambda: 2**64),
    recipe("'x' * 70_000", lambda: "x" * 70_000),
    recipe("'é' * 30_000", lambda: "é" * 30_000),
    recipe("'x' * 60_000", lambda: "x" * 60_000),
    recipe("'\\x00\\n' * 1000", lambda: "\x00\n" * 1000),
]

ODD_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\n",
    "a\nb",
    "\r\n",
    "\t",
    "\u2028",
    "\ufeff",
    "é",
    "😀",
    "\U0010ffff",
    "k\ud800",
    "\udfff",
    "a\ud83d",
    '"',
    "\\",
    "</script>",
    "{tests}",
    "%s",
]
SURROGATES = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(ODD_TEXT),
    st.builds(lambda a, s: a + s, st.text(max_size=3), SURROGATES),
)
NOT_JSON = [
    object(),
    Decimal("1.5"),
    Fraction(1, 3),
    datetime(2030, 1, 1, tzinfo=UTC),
    date(2030, 1, 1),
    1j,
    Ellipsis,
    b"",
    b"bytes",
    bytearray(b"x"),
    frozenset(),
    {1, 2},
    range(3),
    int,
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    TEXT,
    st.binary(max_size=4),
    st.sampled_from(NOT_JSON),
)
ODD_KEYS = st.one_of(st.integers(), st.none(), st.booleans(), st.floats(), st.tuples(), TEXT)
# kombu's JSON turns a dict of exactly these two keys into another type (or refuses it).
ENVELOPE_TYPES = st.one_of(
    st.sampled_from(["bytes", "base64", "decimal", "datetime", "date", "time", "uuid", "nope"]),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(TEXT, inner, max_size=3),
        st.fixed_dictionaries({"__type__": ENVELOPE_TYPES, "__value__": inner}),
        st.fixed_dictionaries(
            {"__type__": ENVELOPE_TYPES, "__value__": inner}, optional={"other": inner}
        ),
        st.dictionaries(ODD_KEYS, inner, min_size=1, max_size=2),
        st.frozensets(st.integers(), max_size=2),
    ),
    max_leaves=8,
)
ARG = st.one_of(VALUES, VALUES, st.sampled_from(BIG_RECIPES))
ARGS = st.lists(ARG, max_size=3)
KWARG_NAMES = TEXT.filter(
    lambda name: (
        name
        not in {
            "seconds",
            "minutes",
            "hours",
            "days",
            "delta",
            "eta",
            "key",
            "on_conflict",
            "on_commit",
        }
    )  # fmt: skip
)
KWARGS = st.dictionaries(KWARG_NAMES, ARG, max_size=2)
# What enqueue()/spec() take as args and kwargs: anything at all.
ANY_ARGS = st.one_of(ARGS, ARGS.map(tuple), VALUES, st.sampled_from(BIG_RECIPES))
ANY_KWARGS = st.one_of(st.none(), KWARGS, st.dictionaries(ODD_KEYS, ARG, max_size=2), VALUES)
