"""API tokens: issuing (only a digest is kept), authenticating, listing and revoking."""

from __future__ import annotations

import hashlib
import secrets
import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from coddl.runtime.store.connection import MAX_ID, Database, tolerant
from coddl.runtime.store.schema import TokenRow
from coddl.runtime.store.views import TokenView, User, token_view


class LastAdmin(ValueError):
    """Revoking this token would leave no active admin token."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore(Database):
    def create_token(self, user: str, admin: bool = False, expires_at: float | None = None) -> str:
        return self.issue_token(user, admin, expires_at)[0]

    def issue_token(self, user: str, admin: bool = False, expires_at: float | None = None) -> tuple[str, TokenView]:
        """A new token (returned once; only its digest is kept) and how it is listed."""
        token = secrets.token_urlsafe(32)
        with self._w() as s:
            row = TokenRow(user=user, digest=digest(token), admin=admin, created_at=time.time(), expires_at=expires_at)
            s.add(row)
            s.flush()
            return token, token_view(row)

    def authenticate(self, token: str, now: float | None = None) -> User | None:
        """The token's user if it is known, not revoked and not expired."""
        with self._r() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.digest == digest(token)))
            if row is None or token_view(row).state(time.time() if now is None else now) != "active":
                return None
            return User(row.user, row.admin)

    def token_state(self, token: str) -> str | None:
        """Why a token that does not authenticate fails: "revoked", "expired", or None (unknown)."""
        with self._r() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.digest == digest(token)))
            return None if row is None else token_view(row).state(time.time())

    @tolerant
    def list_tokens(self, user: str | None = None) -> list[TokenView]:
        with self._r() as s:
            q = select(TokenRow).order_by(TokenRow.id)
            if user is not None:
                q = q.where(TokenRow.user == user)
            return [token_view(r) for r in s.scalars(q)]

    def get_token(self, token_id: int) -> TokenView | None:
        if not 0 < token_id <= MAX_ID:
            return None
        with self._r() as s:
            row = s.get(TokenRow, token_id)
            return None if row is None else token_view(row)

    def revoke_token(self, token_id: int, by: str) -> TokenView:
        """Revoke a token (kept in the list, marked revoked). Raises LastAdmin rather than revoke the
        only active admin token: nobody could then create tokens through the API."""
        now = time.time()
        with self._w() as s:
            row = s.get(TokenRow, token_id)
            if row.revoked_at is None:
                if row.admin and token_view(row).state(now) == "active" and self._active_admins(s, now) <= 1:
                    raise LastAdmin(f"token {token_id} is the only active admin token; create another first")
                row.revoked_at, row.revoked_by = now, by
            return token_view(row)

    @staticmethod
    def _active_admins(s: Session, now: float) -> int:
        q = select(func.count()).select_from(TokenRow).where(
            TokenRow.admin, TokenRow.revoked_at.is_(None),
            (TokenRow.expires_at.is_(None)) | (TokenRow.expires_at > now))
        return s.scalar(q)

    def has_admin(self) -> bool:
        """Is there an admin token that still works (not revoked, not expired)?"""
        with self._r() as s:
            return self._active_admins(s, time.time()) > 0
