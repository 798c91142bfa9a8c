"""A request reads its user's permissions (their own and their roles') in one query, and
what it reads is exactly Django's ModelBackend answer: a role granted or taken away
counts from the next request on, an inactive account has none, a superuser has all."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from durableruns import roles
from durableruns.models import Run
from tests.web.dashboard import make_run, make_step

pytestmark = pytest.mark.django_db

PERMISSION_TABLE = re.compile(r'(FROM|JOIN)\s+"?auth_permission"?\s', re.IGNORECASE)


def _permission_reads(client, url: str, **headers: str) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, headers=headers)
    reads = [q for q in captured.captured_queries if PERMISSION_TABLE.search(q["sql"])]
    return response.status_code, len(reads)


def test_an_unchanged_poll_reads_the_permissions_in_one_query(client, alice):
    client.force_login(alice)
    run = make_run("perm-poll", status=Run.Status.RUNNING, started_at=timezone.now())
    make_step(run, 0)
    page = client.get(reverse("run", args=[run.id])).content.decode()
    version = re.search(r'"X-Live-Version": "([0-9a-f]+)"', page).group(1)

    status, reads = _permission_reads(
        client, reverse("run", args=[run.id]), HX_Request="true", X_Live_Version=version
    )

    assert (status, reads) == (204, 1)


def test_a_page_that_asks_several_permissions_still_reads_them_once(client, alice):
    """The run page asks view, operate and decide: a reviewer is refused some of them,
    and a refusal must not send the check to a second backend that reads them again."""
    client.force_login(alice)
    make_run("perm-page", status=Run.Status.SUCCEEDED)

    status, reads = _permission_reads(client, reverse("run", args=["perm-page"]))

    assert (status, reads) == (200, 1)


@pytest.mark.parametrize("role", [roles.REVIEWER, roles.OPERATOR, roles.ADMIN])
def test_each_role_has_what_django_would_give_it(django_user_model, role):
    user = django_user_model.objects.create_user(f"user-{role}")
    roles.grant(user, role)
    user.user_permissions.add(Permission.objects.get(codename="view_auditevent"))

    ours = roles._permissions(django_user_model.objects.get(pk=user.pk))
    django = ModelBackend().get_all_permissions(django_user_model.objects.get(pk=user.pk))

    assert ours == django
    assert "durableruns.view_auditevent" in ours and set(roles.GRANTS[role]) <= ours


def test_a_role_taken_away_counts_from_the_next_request(client, bob):
    client.force_login(bob)
    make_run("perm-revoked", status=Run.Status.SUCCEEDED)
    url = reverse("run", args=["perm-revoked"])
    assert client.get(url).status_code == 200

    bob.groups.clear()

    assert client.get(url).status_code == 403


def test_an_inactive_account_has_no_permission_and_a_superuser_every_one(django_user_model):
    gone = django_user_model.objects.create_user("gone", is_active=False)
    roles.grant(gone, roles.ADMIN)
    root = django_user_model.objects.create_superuser("root")

    assert not roles.has(django_user_model.objects.get(pk=gone.pk), roles.VIEW_RUNS)
    fresh = django_user_model.objects.get(pk=root.pk)
    assert roles.has(fresh, roles.MANAGE_POLICIES)
    assert fresh.get_all_permissions() == ModelBackend().get_all_permissions(root)
