"""The token endpoints (admin only): list every token, create one (optionally expiring), revoke one.

A token is shown once, when it is created; the store keeps its SHA-256 digest, and a listing shows
the first 8 hex digits of that digest so that people can tell their tokens apart. A revoked token
stays in the list (who revoked it, when); an expired one stays too. The last active admin token
cannot be revoked: with none left, nobody could create tokens through the API.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import ConfigDict, Field, field_validator

from coddl.runtime.wire import SafeJSONResponse, schema_body, text_param
from coddl.runtime.spec import SpecError, StoredInput, user_name_problem, validate
from coddl.runtime.store import LastAdmin, Store, User

MAX_LIFETIME_S = 10 * 365 * 86400.0  # ten years: anything longer is "never", which is the default


class TokenRequest(StoredInput):
    """A new API token."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="TokenRequest")

    user: str = Field(description="who the token is for (1-64 printable characters)", examples=["alice"])
    admin: bool = Field(False, strict=True, description="may see and cancel every user's jobs and manage tokens")
    expires_in_s: float | None = Field(None, gt=0, le=MAX_LIFETIME_S, strict=True,
                                       description="seconds until the token stops working (default: never)")

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        problem = user_name_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v


def token_routes(store: Store, user: Callable[..., User], body: Callable[..., Any]) -> APIRouter:
    """The /tokens routes, authenticated by the app's ``user`` dependency and reading bodies with ``body``."""
    router = APIRouter(prefix="/tokens", tags=["tokens"])

    def admin(u: User = Depends(user)) -> User:
        if not u.admin:
            raise HTTPException(403, "only an admin may manage tokens")
        return u

    @router.get("", summary="every token (admin only): user, role, created, expires, revoked")
    def list_tokens(user_: str | None = Query(None, alias="user", max_length=64, description="only this user's"),
                    _a: User = Depends(admin)) -> SafeJSONResponse:
        now = time.time()
        return SafeJSONResponse([t.as_json(now) for t in store.list_tokens(text_param("user", user_))])

    @router.post("", status_code=201, summary="create a token (admin only); the token is in this answer only",
                 openapi_extra=schema_body(TokenRequest))
    def create_token(_a: User = Depends(admin), data: Any = Depends(body)) -> SafeJSONResponse:
        try:
            req = validate(TokenRequest, data, "token", what="token")
        except SpecError as e:
            raise HTTPException(422, str(e)) from None
        expires_at = None if req.expires_in_s is None else time.time() + req.expires_in_s
        token, view = store.issue_token(req.user, req.admin, expires_at)
        return SafeJSONResponse({"token": token, **view.as_json(time.time())}, status_code=201)

    @router.delete("/{token_id}", summary="revoke a token (admin only); it stays listed as revoked")
    def revoke_token(token_id: int, a: User = Depends(admin)) -> SafeJSONResponse:
        if store.get_token(token_id) is None:
            raise HTTPException(404, f"token {token_id}: no such token")
        try:
            return SafeJSONResponse(store.revoke_token(token_id, a.name).as_json(time.time()))
        except LastAdmin as e:
            raise HTTPException(409, str(e)) from None

    return router
