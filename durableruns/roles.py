"""Roles are Django groups with permissions (ARCHITECTURE.md section 9).

| action                                            | reviewer | operator | admin |
| view runs, steps, effects                          | yes      | yes      | yes   |
| approve / reject / edit-and-approve                | yes      | no       | yes   |
| resolve escalations, cancel, resume, fork, replay  | no       | yes      | yes   |
| retention and redaction policies, audit log        | no       | no       | yes   |
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

REVIEWER, OPERATOR, ADMIN = "reviewer", "operator", "admin"

VIEW_RUNS = "durableruns.view_run"
DECIDE_APPROVALS = "durableruns.decide_approval"
OPERATE_RUNS = "durableruns.operate_run"
MANAGE_POLICIES = "durableruns.manage_policies"

GRANTS: dict[str, tuple[str, ...]] = {
    REVIEWER: (VIEW_RUNS, DECIDE_APPROVALS),
    OPERATOR: (VIEW_RUNS, OPERATE_RUNS),
    ADMIN: (VIEW_RUNS, DECIDE_APPROVALS, OPERATE_RUNS, MANAGE_POLICIES),
}


def ensure_groups(**kwargs: Any) -> None:
    """Create the three groups with their permissions (runs after every migrate)."""
    from django.contrib.auth.models import Group, Permission

    for role, perms in GRANTS.items():
        group, _ = Group.objects.get_or_create(name=role)
        codenames = [perm.split(".", 1)[1] for perm in perms]
        group.permissions.set(
            Permission.objects.filter(content_type__app_label="durableruns", codename__in=codenames)
        )


def grant(user: Any, role: str) -> None:
    from django.contrib.auth.models import Group

    user.groups.add(Group.objects.get(name=role))


ViewFunction = Callable[..., HttpResponse]


def permission_required(perm: str) -> Callable[[ViewFunction], ViewFunction]:
    """403 (not a login redirect) for a logged-in user without `perm`.

    Anonymous users never get here: LoginRequiredMiddleware sends them to log in.
    """

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has(request.user, perm):
                raise PermissionDenied(f"needs {perm}")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def has(user: Any, perm: str) -> bool:
    """`user.has_perm(perm)`, with the user's permissions read first in one query.

    Django's ModelBackend reads a user's own and their groups' permissions in two
    queries (four tables joined), once per request; every page and every live poll
    asks, so that was a third of an unchanged poll's time. The set read here is the
    one ModelBackend would build, stored where it keeps it (`_perm_cache`, the cache
    it checks first), so every later check in the request is free too. A superuser,
    an inactive or an anonymous user is left to Django, which answers without it."""
    asks_django = not user.is_active or user.is_anonymous or user.is_superuser
    if not asks_django and not hasattr(user, "_perm_cache"):
        user._perm_cache = _permissions(user)
    return bool(user.has_perm(perm))


def _permissions(user: Any) -> set[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_permissions_sql(), [user.pk, user.pk])
        return {f"{app_label}.{codename}" for app_label, codename in cursor.fetchall()}


# ModelBackend's two reads (a user's own permissions; their groups') as one statement.
_PERMISSIONS = (
    "SELECT ct.app_label, p.codename FROM {permission} p"
    " JOIN {content_type} ct ON ct.id = p.content_type_id"
    " WHERE p.id IN (SELECT permission_id FROM {own} WHERE {user} = %s)"
    " OR p.id IN (SELECT g.permission_id FROM {granted} g"
    " JOIN {member} m ON m.group_id = g.group_id WHERE m.{user} = %s)"
)


@functools.cache
def _permissions_sql() -> str:
    """_PERMISSIONS with this project's table names, written once: building the same
    query with the ORM took ten times longer in Python than Postgres takes to answer."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType
    from django.db import connection

    user = get_user_model()
    tables = {
        "permission": Permission,
        "content_type": ContentType,
        "own": user.user_permissions.through,
        "granted": Group.permissions.through,
        "member": user.groups.through,
    }
    names = {key: connection.ops.quote_name(model._meta.db_table) for key, model in tables.items()}
    names["user"] = connection.ops.quote_name(user._meta.model_name + "_id")
    return _PERMISSIONS.format(**names)  # names from the models' metadata, never input


def error_for(user: Any, error: Any) -> Any:
    """A run's or step's recorded error as `user` may see it: the traceback (server
    paths and code) is for operators and admins; everyone else gets type and message."""
    if not isinstance(error, dict) or "traceback" not in error:
        return error
    if user is not None and user.has_perm(OPERATE_RUNS):
        return error
    return {key: value for key, value in error.items() if key != "traceback"}
