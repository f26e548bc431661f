"""A corpus of bad API requests, on SQLite and on a real PostgreSQL: each is refused with the expected
status and a one-line message naming the field, and nothing already accepted changes (jobs, tokens
and events are compared before and after every case). None may answer 500.

Each case is (id, method, path, who, body, expected status, fragment of the message). ``body`` is a
dict/list sent as JSON (with ``\\uXXXX`` escapes for anything not ASCII, the way a client encodes a
lone surrogate), ``RAW(bytes)`` sent as it is, or None. The server's body limit is 64 KiB here.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from api_server import live_api
from postgres import BACKENDS, backend_url
from runtime_live import TINY_JOB, tiny_job

from coddl.runtime.limits import ApiLimits
from coddl.runtime.store import Store

LIMIT = 64 * 1024
IN_TMP = tempfile.NamedTemporaryFile(suffix=".py", dir="/tmp")  # a script no confined job sees; removed on exit
DROP = object()
BIG = 2**63
SURROGATE, LOW_SURROGATE, NUL = "\ud800", "\udfff", "\x00"


@dataclass(frozen=True)
class RAW:
    data: bytes
    chunked: bool = False  # sent without Content-Length: the server must count as it reads


def job(**changes: Any) -> dict[str, Any]:
    """A valid job with ``changes`` (DROP removes a field)."""
    out = dict(tiny_job("ok", 10))
    for k, v in changes.items():
        if v is DROP:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def env(**values: Any) -> dict[str, Any]:
    return job(env={"STEP_S": "0.01", **values})


def token(**fields: Any) -> dict[str, Any]:
    return {"user": "carol", **fields}


def nested(depth: int) -> bytes:
    return b'{"name": ' + b"[" * depth + b"]" * depth + b"}"


# ------------------------------------------------------------------------------------------ the corpus
TEXT_FIELDS = [  # (field, a job with BAD in that field, the field as the message names it)
    ("name", lambda bad: job(name=f"x{bad}"), "name"),
    ("model", lambda bad: job(model=f"m{bad}"), "model"),
    ("user", lambda bad: job(user=f"u{bad}"), "user"),
    ("entrypoint", lambda bad: job(command=DROP, entrypoint=f"pkg.mod:f{bad}"), "entrypoint"),
    ("command word", lambda bad: job(command=["python", str(TINY_JOB), f"--x{bad}"]), "command.2"),
    ("command string", lambda bad: job(command=f"python {TINY_JOB} --x{bad}"), "command"),
    ("args", lambda bad: job(command=DROP, entrypoint="pkg.mod:f", args=["--a", f"b{bad}"]), "args.1"),
    ("env value", lambda bad: env(LR=f"0.1{bad}"), "env.LR"),
    ("env name", lambda bad: env(**{f"LR{bad}": "1"}), "env"),
    ("unknown field", lambda bad: job(**{f"x{bad}": 1}), "key"),
]
TEXT_CASES = [
    (f"{label}: {kind}", "POST", "/jobs", "alice", make(bad), 422, f"{where}")
    for label, make, where in TEXT_FIELDS
    for kind, bad in (("lone high surrogate", SURROGATE), ("lone low surrogate", LOW_SURROGATE), ("NUL", NUL))
]
TEXT_CASES += [
    ("model: surrogate message", "POST", "/jobs", "alice", job(model=SURROGATE), 422,
     "job: model: is not valid Unicode (a lone surrogate U+D800"),
    ("env value: NUL message", "POST", "/jobs", "alice", env(X=NUL), 422, "job: env.X: must not contain a NUL"),
    ("body: invalid UTF-8 byte", "POST", "/jobs", "alice", RAW(b'{"name": "\xff"}'), 400, "body: not UTF-8 (byte 0xff"),
    ("body: overlong UTF-8", "POST", "/jobs", "alice", RAW(b'{"name": "\xc0\xaf"}'), 400, "body: not UTF-8"),
    ("body: UTF-16", "POST", "/jobs", "alice", RAW(json.dumps(job()).encode("utf-16")), 400, "body: not UTF-8"),
    ("body: UTF-8 BOM", "POST", "/jobs", "alice", RAW(b"\xef\xbb\xbf" + json.dumps(job()).encode()), 422,
     "body: not valid JSON"),
    ("user: blank", "POST", "/jobs", "root", job(user="   "), 422, "job: user: must be 1-64 printable"),
    ("user: newline", "POST", "/jobs", "root", job(user="a\nb"), 422, "job: user: must be 1-64 printable"),
    ("user: surrounded by blanks", "POST", "/jobs", "root", job(user=" al "), 422, "job: user: must be 1-64"),
    ("user: 65 characters", "POST", "/jobs", "root", job(user="u" * 65), 422, "job: user: must be 1-64"),
    ("model: control character", "POST", "/jobs", "alice", job(model="a\x1bb"), 422, "job: model: must be a printable"),
    ("model: too long", "POST", "/jobs", "alice", job(model="m" * 129), 422,
     "job: model: must be a printable name of at most 128 characters"),
    ("model: empty", "POST", "/jobs", "alice", job(model=""), 422, "job: model: must not be empty"),
    ("name: trailing newline", "POST", "/jobs", "alice", job(name="ok\n"), 422, "job: name: must be 1-64 letters"),
    ("entrypoint: trailing newline", "POST", "/jobs", "alice", job(command=DROP, entrypoint="pkg.mod:f\n"), 422,
     "job: entrypoint: must be 'package.module:function'"),
    ("env name: trailing newline", "POST", "/jobs", "alice", env(**{"A\n": "1"}), 422,
     "job: env: 'A\\n' is not a valid environment variable name"),
]

INTEGER_CASES = [
    (f"{field} = {label}", "POST", "/jobs", "alice", job(**{field: value}), 422, f"job: {field}: {fragment}")
    for field in ("steps", "min_gpus", "max_gpus", "batch_size")
    for label, value, fragment in (
        ("2^31", 2**31, "must be <= 2147483647"),
        ("2^63", BIG, "must be <= 2147483647"),
        ("2^64", 2**64, "must be <= 2147483647"),
        ("10^30", 10**30, "must be <= 2147483647"),
        ("1.0", 1.0, "must be an integer, got 1.0"),
        ("'8'", "8", "must be an integer, got '8'"),
        ("true", True, "must be an integer, got True"),
    )
]
INTEGER_CASES += [
    ("steps = 0", "POST", "/jobs", "alice", job(steps=0), 422, "job: steps: must be >= 1, got 0"),
    ("steps = -1", "POST", "/jobs", "alice", job(steps=-1), 422, "job: steps: must be >= 1, got -1"),
    ("steps = 1e3", "POST", "/jobs", "alice", RAW(json.dumps(job()).replace('"steps": 10', '"steps": 1e3').encode()),
     422, "job: steps: must be an integer, got 1000.0"),
    ("epochs = 2^63", "POST", "/jobs", "alice", job(steps=DROP, epochs=BIG, steps_per_epoch=1), 422,
     "job: epochs: must be <= 2147483647"),
    ("steps_per_epoch = 2^63", "POST", "/jobs", "alice", job(steps=DROP, epochs=1, steps_per_epoch=BIG), 422,
     "job: steps_per_epoch: must be <= 2147483647"),
    ("epochs × steps_per_epoch overflows", "POST", "/jobs", "alice",
     job(steps=DROP, epochs=2**16, steps_per_epoch=2**16), 422,
     "job: steps_per_epoch: epochs × steps_per_epoch = 4294967296 steps, more than the store holds"),
    ("max_gpus below min_gpus", "POST", "/jobs", "alice", job(min_gpus=2, max_gpus=1), 422,
     "job: max_gpus: must be >= min_gpus (2), got 1"),
    ("a 5,000-digit number", "POST", "/jobs", "alice",
     RAW(json.dumps(job()).replace('"steps": 10', '"steps": ' + "9" * 5000).encode()), 422,
     "body: not valid JSON (a number with too many digits)"),
    ("NaN", "POST", "/jobs", "alice", RAW(json.dumps(job()).replace('"steps": 10', '"steps": NaN').encode()), 422,
     "body: not valid JSON (NaN is not a JSON number)"),
    ("Infinity", "POST", "/jobs", "alice",
     RAW(json.dumps(job()).replace('"steps": 10', '"steps": Infinity').encode()), 422, "Infinity is not a JSON number"),
    ("-Infinity", "POST", "/jobs", "alice",
     RAW(json.dumps(job()).replace('"steps": 10', '"steps": -Infinity').encode()), 422, "is not a JSON number"),
    ("1e400", "POST", "/jobs", "alice", RAW(json.dumps(job()).replace('"steps": 10', '"steps": 1e400').encode()), 422,
     "job: steps: must be an integer, got inf"),
    ("min_gpus beyond the cluster", "POST", "/jobs", "alice", job(min_gpus=5, max_gpus=8), 422,
     "job: min_gpus: needs 5 GPUs at once and the cluster has 4 GPUs"),
]

SIZE_CASES = [
    ("10 MB env value (Content-Length)", "POST", "/jobs", "alice", env(BIG="x" * 10_000_000), 413,
     "body: larger than this server's limit of 65,536 bytes"),
    ("65 KiB body (Content-Length)", "POST", "/jobs", "alice", env(BIG="x" * LIMIT), 413, "larger than this server's"),
    ("10 MB chunked body", "POST", "/jobs", "alice", RAW(json.dumps(env(BIG="x" * 10_000_000)).encode(), chunked=True),
     413, "body: larger than this server's limit"),
    ("65 KiB chunked body", "POST", "/jobs", "alice", RAW(json.dumps(env(BIG="x" * LIMIT)).encode(), chunked=True),
     413, "larger than this server's limit"),
    ("oversized body on GET /jobs", "GET", "/jobs", "alice", RAW(b"x" * (LIMIT + 1)), 413, "larger than this server's"),
    ("oversized body on a token request", "POST", "/tokens", "root", token(user="x" * LIMIT), 413, "larger than"),
    ("100,000 command words", "POST", "/jobs", "alice", job(command=["python", str(TINY_JOB)] + ["a"] * 100_000), 413,
     "larger than"),
]

STRUCTURE_CASES = [
    ("duplicate key", "POST", "/jobs", "alice", RAW(b'{"name": "a", "name": "b", "steps": 1}'), 422,
     "body: duplicate key 'name'"),
    ("duplicate steps", "POST", "/jobs", "alice",
     RAW(json.dumps(job()).replace('"steps": 10', '"steps": 10, "steps": 20').encode()), 422, "duplicate key 'steps'"),
    ("duplicate env key", "POST", "/jobs", "alice",
     RAW(json.dumps(job()).replace('"STEP_S": "0.05"', '"STEP_S": "0.05", "STEP_S": "9"').encode()), 422,
     "body: duplicate key 'STEP_S'"),
    ("nested 10,000 deep", "POST", "/jobs", "alice", RAW(nested(10_000)), 422, "body: nested too deeply"),
    ("nested 500 deep", "POST", "/jobs", "alice", RAW(nested(500)), 422, "nested more than 16 levels deep"),
    ("a list", "POST", "/jobs", "alice", [1, 2, 3], 422, "job: expected a mapping of job fields, got a list"),
    ("a string", "POST", "/jobs", "alice", "job", 422, "expected a mapping of job fields, got text"),
    ("a number", "POST", "/jobs", "alice", 7, 422, "expected a mapping of job fields, got an integer"),
    ("null", "POST", "/jobs", "alice", RAW(b"null"), 422, "expected a mapping of job fields, got nothing (null)"),
    ("empty body", "POST", "/jobs", "alice", RAW(b""), 422, "body: not valid JSON (Expecting value"),
    ("not JSON", "POST", "/jobs", "alice", RAW(b"{not json"), 422, "body: not valid JSON"),
    ("trailing garbage", "POST", "/jobs", "alice", RAW(json.dumps(job()).encode() + b" x"), 422, "Extra data"),
    ("single quotes", "POST", "/jobs", "alice", RAW(b"{'name': 'x'}"), 422, "body: not valid JSON"),
    ("comments", "POST", "/jobs", "alice", RAW(b'{"name": "x" /* hi */}'), 422, "body: not valid JSON"),
    ("form-encoded", "POST", "/jobs", "alice", RAW(b"name=x&steps=1"), 422, "body: not valid JSON"),
]

FIELD_CASES = [
    ("name: an integer", "POST", "/jobs", "alice", job(name=7), 422, "job: name: must be text, got 7"),
    ("name: missing", "POST", "/jobs", "alice", job(name=DROP), 422, "job: name: required"),
    ("name: with a space", "POST", "/jobs", "alice", job(name="a b"), 422, "job: name: must be 1-64 letters"),
    ("name: 65 characters", "POST", "/jobs", "alice", job(name="n" * 65), 422, "job: name: must be 1-64 letters"),
    ("command: an integer", "POST", "/jobs", "alice", job(command=7), 422, "job: command"),
    ("command: a number among words", "POST", "/jobs", "alice", job(command=["python", str(TINY_JOB), 1]), 422,
     "job: command.2: must be text, got 1"),
    ("command: empty list", "POST", "/jobs", "alice", job(command=[]), 422, "job: command: must not be empty"),
    ("command: unclosed quote", "POST", "/jobs", "alice", job(command="python 'x.py"), 422,
     "job: command: No closing quotation"),
    ("command: relative script", "POST", "/jobs", "alice", job(command=["python", "rel/train.py"]), 422,
     "job: command: script path must be absolute"),
    ("command: no such script", "POST", "/jobs", "alice", job(command=["python", "/nonexistent/t.py"]), 422,
     "job: command: no such script on the server"),
    ("command: script under /tmp", "POST", "/jobs", "alice", job(command=["python", IN_TMP.name]), 422,
     "which a job does not see (its /tmp is its own)"),
    ("command: script name too long", "POST", "/jobs", "alice", job(command=["python", "/" + "a" * 5000 + ".py"]),
     422, "job: command: File name too long"),
    ("command: not Python", "POST", "/jobs", "alice", job(command=["bash", str(TINY_JOB)]), 422,
     "job: command: must run a Python script"),
    ("command: python -m", "POST", "/jobs", "alice", job(command=["python", "-m", "pkg"]), 422,
     "job: command: 'python -m MODULE' is not supported"),
    ("command: python -c", "POST", "/jobs", "alice", job(command=["python", "-c", "print(1)"]), 422,
     "job: command: unsupported interpreter option '-c'"),
    ("command: interpreter only", "POST", "/jobs", "alice", job(command=["python3", "-u"]), 422,
     "job: command: names no script to run"),
    ("command and entrypoint", "POST", "/jobs", "alice", job(entrypoint="pkg.mod:f"), 422,
     "job: command: give exactly one of command or entrypoint"),
    ("neither command nor entrypoint", "POST", "/jobs", "alice", job(command=DROP), 422,
     "job: command: give exactly one of command or entrypoint"),
    ("entrypoint: no function", "POST", "/jobs", "alice", job(command=DROP, entrypoint="pkg.mod"), 422,
     "job: entrypoint: must be 'package.module:function'"),
    ("entrypoint: non-ASCII identifier", "POST", "/jobs", "alice", job(command=DROP, entrypoint="pkg.mød:f"), 422,
     "job: entrypoint: must be"),
    ("args with a command", "POST", "/jobs", "alice", job(args=["-x"]), 422, "job: args: only with entrypoint"),
    ("args: a string", "POST", "/jobs", "alice", job(command=DROP, entrypoint="pkg.mod:f", args="-x"), 422,
     "job: args: input should be a valid list"),
    ("args: a number", "POST", "/jobs", "alice", job(command=DROP, entrypoint="pkg.mod:f", args=["-x", 1]), 422,
     "job: args.1: must be text, got 1"),
    ("steps and epochs", "POST", "/jobs", "alice", job(epochs=2, steps_per_epoch=5), 422,
     "job: steps: give exactly one of steps or epochs"),
    ("neither steps nor epochs", "POST", "/jobs", "alice", job(steps=DROP), 422,
     "job: steps: give exactly one of steps or epochs"),
    ("epochs without steps_per_epoch", "POST", "/jobs", "alice", job(steps=DROP, epochs=2), 422,
     "job: steps_per_epoch: required with epochs"),
    ("steps_per_epoch with steps", "POST", "/jobs", "alice", job(steps_per_epoch=5), 422,
     "job: steps_per_epoch: only with epochs"),
    ("env: a list", "POST", "/jobs", "alice", job(env=["A=1"]), 422, "job: env: input should be a valid dictionary"),
    ("env value: a number", "POST", "/jobs", "alice", env(LR=0.1), 422, "job: env.LR: must be text, got 0.1"),
    ("env value: a boolean", "POST", "/jobs", "alice", env(DEBUG=True), 422, "job: env.DEBUG: must be text, got True"),
    ("env value: null", "POST", "/jobs", "alice", env(X=None), 422, "job: env.X: must be text, got None"),
    ("env value: a mapping", "POST", "/jobs", "alice", env(X={"a": "b"}), 422, "job: env.X: must be text"),
    ("env name: with a space", "POST", "/jobs", "alice", env(**{"BAD NAME": "1"}), 422,
     "job: env: 'BAD NAME' is not a valid environment variable name"),
    ("env name: with '='", "POST", "/jobs", "alice", env(**{"A=B": "1"}), 422, "is not a valid environment variable"),
    ("env name: empty", "POST", "/jobs", "alice", env(**{"": "1"}), 422, "job: env: '' is not a valid environment"),
    ("env name: reserved CODDL_", "POST", "/jobs", "alice", env(CODDL_STORE_ADDR="1.2.3.4:1"), 422,
     "job: env: CODDL_STORE_ADDR: names starting with CODDL_ are set by coddl"),
    ("unknown field", "POST", "/jobs", "alice", job(gpus=3), 422, "job: gpus: unknown field (valid fields: name,"),
    ("user: someone else, not admin", "POST", "/jobs", "bob", job(user="alice"), 403,
     "job: user: only an admin may submit as 'alice'"),
]

PARAMETER_CASES = [
    ("job id: text", "GET", "/jobs/abc", "alice", None, 422, "job_id: input should be a valid integer"),
    ("job id: 2^31", "GET", f"/jobs/{2**31}", "alice", None, 404, f"job {2**31}: no such job"),
    ("job id: 2^70", "GET", f"/jobs/{2**70}", "alice", None, 404, "no such job"),
    ("job id: negative", "GET", "/jobs/-1", "alice", None, 404, "job -1: no such job"),
    ("job id: 0", "GET", "/jobs/0", "alice", None, 404, "job 0: no such job"),
    ("job id: 1.5", "GET", "/jobs/1.5", "alice", None, 422, "job_id: input should be a valid integer"),
    ("job id: 5,000 digits", "GET", "/jobs/" + "9" * 5000, "alice", None, 422,
     "job_id: unable to parse input string as an integer, exceeded maximum size"),
    ("limit: 5,000 digits", "GET", "/jobs?limit=" + "9" * 5000, "alice", None, 422,
     "limit: unable to parse input string as an integer"),
    ("logs of job 2^70", "GET", f"/jobs/{2**70}/logs", "alice", None, 404, "no such job"),
    ("logs: follow=maybe", "GET", "/jobs/1/logs?follow=maybe", "alice", None, 422, "follow: input should be a valid"),
    ("cancel job 2^70", "DELETE", f"/jobs/{2**70}", "alice", None, 404, "no such job"),
    ("cancel another user's job", "DELETE", "/jobs/1", "bob", None, 403, "job 1 belongs to another user"),
    ("cancel a finished job", "DELETE", "/jobs/3", "alice", None, 409, "job 3 already finished"),
    ("limit = 0", "GET", "/jobs?limit=0", "alice", None, 422, "limit: input should be greater than or equal to 1"),
    ("limit = 10,001", "GET", "/jobs?limit=10001", "alice", None, 422, "limit: input should be less than or equal"),
    ("limit = 2^70", "GET", f"/jobs?limit={2**70}", "alice", None, 422, "limit: input should be less than or equal"),
    ("limit = text", "GET", "/jobs?limit=all", "alice", None, 422, "limit: input should be a valid integer"),
    ("before = 0", "GET", "/jobs?before=0", "alice", None, 422, "before: input should be greater than or equal to 1"),
    ("before = text", "GET", "/jobs?before=x", "alice", None, 422, "before: input should be a valid integer"),
    ("user = NUL", "GET", "/jobs?user=%00", "root", None, 422, "user: must not contain a NUL character"),
    ("user = 65 characters", "GET", "/jobs?user=" + "u" * 65, "root", None, 422, "user: string should have at most 64"),
    ("user = someone else, not admin", "GET", "/jobs?user=bob", "alice", None, 403,
     "user: only an admin may list another user's jobs"),
    ("status = bogus", "GET", "/jobs?status=bogus", "alice", None, 422, "status: unknown status 'bogus' (one of queued,"),
    ("status = one bogus of two", "GET", "/jobs?status=queued,done", "alice", None, 422, "unknown status 'done'"),
    ("tokens: user = NUL", "GET", "/tokens?user=%00", "root", None, 422, "user: must not contain a NUL character"),
    ("tokens: id text", "DELETE", "/tokens/abc", "root", None, 422, "token_id: input should be a valid integer"),
    ("tokens: id 2^70", "DELETE", f"/tokens/{2**70}", "root", None, 404, "no such token"),
    ("tokens: id 999999", "DELETE", "/tokens/999999", "root", None, 404, "token 999999: no such token"),
    ("no such route", "GET", "/nope", "alice", None, 404, "Not Found"),
    ("wrong method", "PUT", "/jobs", "alice", None, 405, "Method Not Allowed"),
]

AUTH_CASES = [
    ("no token: list", "GET", "/jobs", "anon", None, 401, "missing bearer token"),
    ("no token: submit", "POST", "/jobs", "anon", job(), 401, "missing bearer token"),
    ("no token: bad body", "POST", "/jobs", "anon", RAW(b"{oops"), 401, "missing bearer token"),
    ("forged token", "GET", "/jobs", "forged", None, 401, "invalid token"),
    ("expired token", "GET", "/jobs", "expired", None, 401, "token expired"),
    ("revoked token", "GET", "/jobs", "revoked", None, 401, "token revoked"),
    ("revoked token: submit", "POST", "/jobs", "revoked", job(), 401, "token revoked"),
    ("another user's job", "GET", "/jobs/1", "bob", None, 403, "job 1 belongs to another user"),
    ("another user's logs", "GET", "/jobs/1/logs", "bob", None, 403, "job 1 belongs to another user"),
    ("tokens: list, not admin", "GET", "/tokens", "alice", None, 403, "only an admin may manage tokens"),
    ("tokens: create, not admin", "POST", "/tokens", "alice", token(), 403, "only an admin may manage tokens"),
    ("tokens: create admin, not admin", "POST", "/tokens", "bob", token(admin=True), 403, "only an admin"),
    ("tokens: revoke, not admin", "DELETE", "/tokens/1", "alice", None, 403, "only an admin may manage tokens"),
]

TOKEN_CASES = [
    ("token user: surrogate", "POST", "/tokens", "root", token(user=f"c{SURROGATE}"), 422,
     "token: user: is not valid Unicode"),
    ("token user: NUL", "POST", "/tokens", "root", token(user="c\x00"), 422, "token: user: must not contain a NUL"),
    ("token user: empty", "POST", "/tokens", "root", token(user=""), 422, "token: user: must be 1-64 printable"),
    ("token user: 65 characters", "POST", "/tokens", "root", token(user="u" * 65), 422, "token: user: must be 1-64"),
    ("token user: newline", "POST", "/tokens", "root", token(user="a\nb"), 422, "token: user: must be 1-64 printable"),
    ("token user: a number", "POST", "/tokens", "root", token(user=5), 422, "token: user: must be text, got 5"),
    ("token user: missing", "POST", "/tokens", "root", {"admin": False}, 422, "token: user: required"),
    ("token admin: 'yes'", "POST", "/tokens", "root", token(admin="yes"), 422,
     "token: admin: input should be a valid boolean"),
    ("token admin: 1", "POST", "/tokens", "root", token(admin=1), 422, "token: admin: input should be a valid boolean"),
    ("token expiry: negative", "POST", "/tokens", "root", token(expires_in_s=-1), 422,
     "token: expires_in_s: must be > 0.0, got -1"),
    ("token expiry: zero", "POST", "/tokens", "root", token(expires_in_s=0), 422, "token: expires_in_s: must be > 0"),
    ("token expiry: a century", "POST", "/tokens", "root", token(expires_in_s=100 * 365 * 86400), 422,
     "token: expires_in_s: must be <= 315360000.0, got 3153600000"),
    ("token expiry: text", "POST", "/tokens", "root", token(expires_in_s="3600"), 422,
     "token: expires_in_s: input should be a valid number"),
    ("token expiry: NaN", "POST", "/tokens", "root", RAW(b'{"user": "c", "expires_in_s": NaN}'), 422,
     "NaN is not a JSON number"),
    ("token: unknown field", "POST", "/tokens", "root", token(role="admin"), 422,
     "token: role: unknown field (valid fields: user, admin, expires_in_s)"),
    ("token: a list", "POST", "/tokens", "root", ["carol"], 422, "token: expected a mapping of token fields, got a list"),
    ("token: duplicate key", "POST", "/tokens", "root", RAW(b'{"user": "a", "user": "b"}'), 422,
     "body: duplicate key 'user'"),
    ("token: not JSON", "POST", "/tokens", "root", RAW(b"user=carol"), 422, "body: not valid JSON"),
    ("revoke the last admin token", "DELETE", "/tokens/3", "root", None, 409,
     "token 3 is the only active admin token; create another first"),
]

CASES = TEXT_CASES + INTEGER_CASES + SIZE_CASES + STRUCTURE_CASES + FIELD_CASES + PARAMETER_CASES + AUTH_CASES + \
    TOKEN_CASES


def test_the_corpus_has_at_least_120_cases_and_unique_names():
    assert len(CASES) >= 120
    assert len({c[0] for c in CASES}) == len(CASES)


# ------------------------------------------------------------------------------------------ the server
@pytest.fixture(scope="module", params=BACKENDS)
def api(request, tmp_path_factory):
    state = tmp_path_factory.mktemp("bad-input")
    store = Store(backend_url(request, request.param, state))
    with live_api(store, state, ApiLimits(max_body_bytes=LIMIT)) as api:
        alice = api.clients["alice"]
        for name in ("first", "second", "done"):  # ids 1, 2, 3: what must stay as it is
            assert alice.post("/jobs", json=tiny_job(name, 10)).status_code == 201
        from coddl.core.job import JobStatus

        store.finish(3, JobStatus.FINISHED, 1.0)
        expired = store.issue_token("erin", expires_at=1.0)[0]  # long expired
        revoked, view = store.issue_token("rob")
        store.revoke_token(view.id, "root")
        for who, tok in (("expired", expired), ("revoked", revoked), ("forged", "not-a-token")):
            api.clients[who] = httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {tok}"}, timeout=30)
        yield api
    store.close()


def send(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    if body is None:
        return client.request(method, path)
    if isinstance(body, RAW):
        if body.chunked:
            return client.request(method, path, content=iter([body.data[i:i + 8192]
                                                              for i in range(0, len(body.data), 8192)]))
        return client.request(method, path, content=body.data)
    return client.request(method, path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("name,method,path,who,body,status,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(api, name, method, path, who, body, status,
                                                                   fragment):
    before = api.snapshot()
    r = send(api.clients[who], method, path, body)
    assert r.status_code == status, f"{name}: {r.status_code} {r.text[:300]}"
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and len(detail) < 400, detail
    assert fragment in detail, detail
    assert api.snapshot() == before


def test_the_server_still_serves_everyone_after_the_corpus(api):
    """Run last in the module: after every bad request, listings and a good submission still work."""
    for who in ("alice", "bob", "root"):
        r = api.clients[who].get("/jobs")
        assert r.status_code == 200
    r = api.clients["alice"].post("/jobs", json=tiny_job("after", 10))
    assert r.status_code == 201 and r.json()["owner"] == "alice"
