"""Text the store can hold and the API can send, both ways: what input is refused, and how rows that an
earlier version stored anyway are shown.

Python strings may hold lone surrogates (a JSON ``"\\ud800"`` escape or a YAML ``"\\ud800"`` decodes to
one); they are not Unicode scalar values, so UTF-8 cannot encode them and any response carrying one
fails. PostgreSQL refuses NUL in text. Input with either is refused, naming the field. Rows written
before that rule are rendered with U+FFFD in place of each surrogate and ``null`` for a float that JSON
cannot carry (a NaN loss), so one such row never turns a listing into an error.
"""

from __future__ import annotations

import math
import re
from typing import Any

PLACEHOLDER = "\ufffd"
MAX_DEPTH = 16  # deeper than any job or token request; a JSON bomb is refused before it is walked
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(s: str) -> str | None:
    """Why ``s`` cannot be stored, or None."""
    if "\x00" in s:
        return "must not contain a NUL character"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"is not valid Unicode (a lone surrogate U+{ord(s[e.start]):04X} at character {e.start})"
    return None


def find_bad_text(value: Any, path: tuple[str | int, ...] = ()) -> tuple[tuple[str | int, ...], str] | None:
    """The first string (key or value) in decoded JSON/YAML that cannot be stored: (path, problem)."""
    if len(path) > MAX_DEPTH:
        return path, f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else (path, problem)
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and (problem := text_problem(k)) is not None:
                return path + (short(k),), f"key {problem}"
            found = find_bad_text(v, path + (k,))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = find_bad_text(v, path + (i,))
            if found is not None:
                return found
    return None


def short(value: Any, limit: int = 60) -> str:
    """A bounded ``repr`` for messages: one line, ASCII-safe, never the whole of a 10 MB input."""
    r = repr(value)
    if _SURROGATE.search(r):  # repr keeps printable non-ASCII; surrogates are not printable, but be sure
        r = _SURROGATE.sub(PLACEHOLDER, r)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def renderable(value: Any) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD and non-finite floats by None: what the API
    sends for a row that cannot be sent as it is (only called after a fast render failed)."""
    if isinstance(value, str):
        return _SURROGATE.sub(PLACEHOLDER, value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {renderable(k) if isinstance(k, str) else k: renderable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [renderable(v) for v in value]
    return value
