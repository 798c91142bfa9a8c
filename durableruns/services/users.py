"""Making the people who use the dashboard: a user with one or more roles (roles.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.db import transaction

from .. import roles
from . import audit

ROLES = (roles.REVIEWER, roles.OPERATOR, roles.ADMIN)


def create_or_grant(
    username: str, role_names: list[str], *, email: str = "", password: str | None = None
) -> tuple[Any, bool]:
    """The user `username` with `role_names` added (created, if new, with `password`, or
    with none usable when it is None). Repeating it is harmless. Returns (user, created).
    Raises ValueError or ValidationError (nothing written) for an unknown role, a bad
    username or a weak password."""
    unknown = sorted(set(role_names) - set(ROLES))
    if unknown or not role_names:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {', '.join(unknown)!r}")
    model = get_user_model()
    # Before any query: a NUL, say, would reach Postgres as a DataError.
    model._meta.get_field(model.USERNAME_FIELD).run_validators(username)
    user = model.objects.filter(username=username).first()
    if user is not None and password is not None:
        raise ValueError(
            f"user {username!r} exists: roles are added, a password is changed with "
            "manage.py changepassword"
        )
    if password is not None:
        password_validation.validate_password(password, user or model(username=username))
    with transaction.atomic():
        created = user is None
        if user is None:
            user = model(username=username, email=email)
            user.full_clean(exclude=["password"])
            user.set_password(password)  # None: an unusable password until changepassword
            user.save()
        before = sorted(user.groups.values_list("name", flat=True))
        for role in role_names:
            roles.grant(user, role)
        after = sorted(user.groups.values_list("name", flat=True))
        if created or after != before:
            audit.record(
                None, "user.grant_roles", user, before={"roles": before}, after={"roles": after}
            )
    return user, created
