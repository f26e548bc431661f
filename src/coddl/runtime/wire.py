"""What crosses HTTP, checked both ways. Request bodies are read the careful way: counted while they stream in (413 as
soon as one passes the limit, not after 10 MB were buffered), UTF-8, and JSON without the decoder's
quiet choices — a duplicate key (the last one would win), ``NaN``/``Infinity`` (not JSON), numbers of
thousands of digits and arrays nested a thousand deep are each a 4xx naming the problem. Text query
parameters are text the store can compare. Responses always render, whatever a row holds."""

from __future__ import annotations

import json
from typing import Any, Callable

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from coddl.runtime.text import renderable, short, text_problem


class BodyError(ValueError):
    """A body that is not acceptable JSON; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def too_large(limit: int) -> str:
    return f"body: larger than this server's limit of {limit:,} bytes"


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """ASGI middleware: a request whose Content-Length is over the limit gets 413 before any route
    runs. Bodies without a length (chunked) are counted by ``read_json`` as they arrive."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            n = declared_length(scope["headers"])
            if n is not None and n > self.limit:
                body = json.dumps({"detail": too_large(self.limit)}).encode()
                await send({"type": "http.response.start", "status": 413,
                            "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def read_body(receive_stream: Any, limit: int) -> bytes:
    """The whole body from ``request.stream()``, or BodyError(413) once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in receive_stream:
        size += len(chunk)
        if size > limit:
            raise BodyError(413, too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return d


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def decode_json(raw: bytes) -> Any:
    """Strict JSON from a request body, or BodyError(422 or 400) with one line saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyError(400, f"body: not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _Duplicate as e:
        raise BodyError(422, f"body: duplicate key {short(e.args[0])}") from None
    except json.JSONDecodeError as e:
        raise BodyError(422, f"body: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise BodyError(422, "body: nested too deeply") from None
    except ValueError as e:  # NaN/Infinity, or an integer of more than 4,300 digits
        reason = str(e) if "JSON number" in str(e) else "a number with too many digits"
        raise BodyError(422, f"body: not valid JSON ({reason})") from None


def json_body(limit: int) -> Callable:
    """A dependency: the request's body as strict JSON, read under ``limit`` bytes."""

    async def body(request: Request) -> Any:
        try:
            return decode_json(await read_body(request.stream(), limit))
        except BodyError as e:
            raise HTTPException(e.status, str(e)) from None

    return body


def text_param(name: str, value: str | None) -> str | None:
    """A text query parameter, or 422: PostgreSQL cannot even compare a NUL."""
    problem = None if value is None else text_problem(value)
    if problem is not None:
        raise HTTPException(422, f"{name}: {problem}")
    return value


def schema_body(model: type) -> dict[str, Any]:
    """OpenAPI for a body the endpoint reads itself (strictly, see ``json_body``): the model's schema,
    so /docs documents every field."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


class SafeJSONResponse(JSONResponse):
    """JSON that always renders: the fast path is Starlette's; a row an earlier version stored with a
    lone surrogate, or a NaN loss, is sent with placeholders (``coddl.runtime.text.renderable``)."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except (UnicodeEncodeError, ValueError):
            return super().render(renderable(content))
