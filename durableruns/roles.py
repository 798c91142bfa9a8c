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
            if not request.user.has_perm(perm):
                raise PermissionDenied(f"needs {perm}")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def error_for(user: Any, error: Any) -> Any:
    """A run's or step's recorded error as `user` may see it: the traceback (server
    paths and code) is for operators and admins; everyone else gets type and message."""
    if not isinstance(error, dict) or "traceback" not in error:
        return error
    if user is not None and user.has_perm(OPERATE_RUNS):
        return error
    return {key: value for key, value in error.items() if key != "traceback"}
