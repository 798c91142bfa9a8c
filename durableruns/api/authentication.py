"""`Authorization: Token dr_…` for scripts: the token is looked up by its digest and
refused (401) when unknown, expired or revoked (durableruns.services.tokens)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from ..services import tokens

KEYWORD = "Token"


class ApiTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("give one token: Authorization: Token dr_...")
        try:
            token = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("invalid token") from None
        row = tokens.authenticate(token)
        if row is None or not row.user.is_active:
            raise AuthenticationFailed("invalid, expired or revoked token")
        return row.user, row

    def authenticate_header(self, request: Request) -> str:
        return KEYWORD


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the token (as DRF's own token scheme was)."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'Token authentication with the prefix "Token": `Token dr_...`',
        }
