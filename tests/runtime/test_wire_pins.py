"""Hand-computed pins of ``runtime/wire.py`` without a server: the body limit at its boundary (declared
and streamed), the strict JSON decoder's one-line reasons, text query parameters and responses that
always render."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import HTTPException
from pydantic import BaseModel

from coddl.runtime.wire import (BodyError, BodyLimit, SafeJSONResponse, decode_json, declared_length, json_body,
                                read_body, schema_body, text_param, too_large)


def test_too_large_names_the_limit_in_bytes():
    assert too_large(262_144) == "body: larger than this server's limit of 262,144 bytes"
    assert too_large(1024) == "body: larger than this server's limit of 1,024 bytes"


def test_declared_length():
    assert declared_length([]) is None
    assert declared_length([(b"host", b"x"), (b"content-length", b"17"), (b"content-length", b"99")]) == 17
    assert declared_length([(b"content-length", b"abc"), (b"content-length", b"5")]) is None  # the first one counts
    assert declared_length([(b"x-content-length", b"5")]) is None


def _call(mw: BodyLimit, scope: dict) -> tuple[list[dict], bool]:
    sent: list[dict] = []
    reached = []

    async def app(scope, receive, send):
        reached.append(scope)

    async def send(msg):
        sent.append(msg)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    mw.app = app
    asyncio.run(mw(scope, receive, send))
    return sent, bool(reached)


def test_body_limit_answers_413_only_past_the_limit():
    mw = BodyLimit(None, 100)  # type: ignore[arg-type]
    sent, reached = _call(mw, {"type": "http", "headers": [(b"content-length", b"100")]})
    assert reached and sent == []
    sent, reached = _call(mw, {"type": "http", "headers": []})  # chunked: counted later
    assert reached and sent == []
    sent, reached = _call(mw, {"type": "websocket", "headers": [(b"content-length", b"101")]})
    assert reached and sent == []
    sent, reached = _call(mw, {"type": "http", "headers": [(b"content-length", b"101")]})
    assert not reached
    body = json.dumps({"detail": "body: larger than this server's limit of 100 bytes"}).encode()
    assert sent == [
        {"type": "http.response.start", "status": 413,
         "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                     (b"content-length", str(len(body)).encode())]},
        {"type": "http.response.body", "body": body},
    ]


async def _chunks(*parts: bytes):
    for p in parts:
        yield p


def test_read_body_counts_every_chunk():
    assert asyncio.run(read_body(_chunks(b"ab", b"cd", b"e"), 5)) == b"abcde"
    assert asyncio.run(read_body(_chunks(), 0)) == b""
    with pytest.raises(BodyError) as e:
        asyncio.run(read_body(_chunks(b"ab", b"cd", b"ef"), 5))
    assert e.value.status == 413 and str(e.value) == "body: larger than this server's limit of 5 bytes"


def test_decode_json_exact_messages():
    assert decode_json(b'{"a": [1, 2.5, null, true, "x"], "b": {}}') == {"a": [1, 2.5, None, True, "x"], "b": {}}
    assert decode_json(b'{"a": 1, "b": 2, "c": 3}') == {"a": 1, "b": 2, "c": 3}
    cases = [
        (b'{"a": 1, "b": 2, "a": 3}', 422, "body: duplicate key 'a'"),
        (b'{"x": 0, "y": {"k": 1, "j": 2, "k": 2}}', 422, "body: duplicate key 'k'"),
        (b'{"' + b"k" * 100 + b'": 1, "' + b"k" * 100 + b'": 2}', 422, "body: duplicate key '" + "k" * 58 + "…"),
        (b"[1, NaN]", 422, "body: not valid JSON (NaN is not a JSON number)"),
        (b"-Infinity", 422, "body: not valid JSON (-Infinity is not a JSON number)"),
        (b"[" + b"9" * 5000 + b"]", 422, "body: not valid JSON (a number with too many digits)"),
        (b"[" * 100_000, 422, "body: nested too deeply"),
        (b'{"a": "\xc3\xa9", "b": "\xe9"}', 400, "body: not UTF-8 (byte 0xe9 at offset 18)"),
        (b"", 422, "body: not valid JSON (Expecting value at line 1 column 1)"),
        (b'{\n"a" 1}', 422, "body: not valid JSON (Expecting ':' delimiter at line 2 column 5)"),
    ]
    for raw, status, message in cases:
        with pytest.raises(BodyError) as e:
            decode_json(raw)
        assert (e.value.status, str(e.value)) == (status, message), raw[:40]


def test_json_body_turns_a_body_error_into_its_status():
    class Req:
        def __init__(self, *parts: bytes):
            self.parts = parts

        def stream(self):
            return _chunks(*self.parts)

    dep = json_body(10)
    assert asyncio.run(dep(Req(b'{"a":', b" 1}"))) == {"a": 1}
    with pytest.raises(HTTPException) as e:
        asyncio.run(dep(Req(b'{"a": "', b'0123456789"}')))
    assert (e.value.status_code, e.value.detail) == (413, "body: larger than this server's limit of 10 bytes")
    with pytest.raises(HTTPException) as e:
        asyncio.run(dep(Req(b"\xff")))
    assert (e.value.status_code, e.value.detail) == (400, "body: not UTF-8 (byte 0xff at offset 0)")


def test_text_param():
    assert text_param("owner", None) is None
    assert text_param("owner", "alice") == "alice"
    with pytest.raises(HTTPException) as e:
        text_param("owner", "al\x00ice")
    assert (e.value.status_code, e.value.detail) == (422, "owner: must not contain a NUL character")


def test_schema_body_documents_the_model():
    class M(BaseModel):
        n: int

    assert schema_body(M) == {"requestBody": {"required": True, "content": {"application/json": {
        "schema": M.model_json_schema()}}}}


def test_a_response_always_renders():
    assert SafeJSONResponse({"a": 1.5}).body == b'{"a":1.5}'
    assert json.loads(SafeJSONResponse({"name": "x\ud800", "loss": float("nan")}).body) == \
        {"name": "x\ufffd", "loss": None}
    assert json.loads(SafeJSONResponse([float("inf")]).body) == [None]
