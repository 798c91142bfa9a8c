"""Secrets at rest (invariant 10): sealed, not destroyed; keys rotate; admins reveal
one value with a reason, audited; exports carry ciphertext; retention shreds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import PermissionDenied
from django.db import connection

from durableruns.engine import redaction, vault
from durableruns.engine.errors import SecretsUnavailable
from durableruns.engine.replay import ForkError
from durableruns.engine.runs import start_run
from durableruns.models import AuditEvent, Run, Step
from durableruns.services import exports, retention, reveal
from durableruns.services import runs as run_services
from tests.conftest import ROOT

pytestmark = [pytest.mark.django_db(transaction=True)]

SECRET = "sk_live_" + "Zx9" * 8


def _finished(drive, run_id: str = "sealed") -> Run:
    run, _ = start_run("t-echo-twice", {"value": {"api_key": SECRET, "n": 1}}, run_id=run_id)
    finished = drive(run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    return finished


def _raw_rows() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(string_agg(t::text, ' '), '') FROM ("
            "SELECT input::text || coalesce(result::text, '') || secrets AS t "
            "FROM durableruns_step UNION ALL "
            "SELECT input::text || coalesce(result::text, '') || secrets FROM durableruns_run"
            ") rows"
        )
        return cursor.fetchone()[0]


def test_it_stores_the_view_in_clear_and_the_secret_only_encrypted(drive):
    finished = _finished(drive)
    assert SECRET not in _raw_rows()
    assert finished.input == {"value": {"api_key": redaction.REDACTED, "n": 1}}
    assert vault.unseal(finished.secrets)["input"]["value"]["api_key"] == SECRET


def test_rotation_encrypts_with_the_newest_key_and_decrypts_with_every_key(drive, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.DURABLERUNS_ENCRYPTION_KEYS = [old]
    finished = _finished(drive)
    settings.DURABLERUNS_ENCRYPTION_KEYS = [new, old]
    assert vault.reveal(finished, "input")["value"]["api_key"] == SECRET
    assert Fernet(new.encode()).decrypt(vault.seal({"x": 1}).encode()) == b'{"x":1}'

    rotated = vault.rotate(finished.secrets)
    settings.DURABLERUNS_ENCRYPTION_KEYS = [new]
    assert vault.unseal(rotated)["input"]["value"]["api_key"] == SECRET
    with pytest.raises(SecretsUnavailable, match="cannot be decrypted"):
        vault.unseal(finished.secrets)


def test_a_run_whose_secrets_no_key_opens_stops_clearly(drive, settings):
    run, _ = start_run("t-echo-twice", {"value": {"api_key": SECRET}}, run_id="lost-key")
    settings.DURABLERUNS_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    finished = drive(run.id)
    assert finished.status == Run.Status.FAILED
    assert finished.error["code"] == "secrets_unavailable"


def test_production_without_a_key_refuses_to_start():
    env = {"DURABLERUNS_REQUIRE_SECRET_KEY": "1", "SECRET_KEY": "x" * 50, "PATH": "/usr/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", "import durableruns.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert "DURABLERUNS_ENCRYPTION_KEYS must be set in production" in proc.stderr


def test_an_admin_reveals_one_value_with_a_reason_and_it_is_audited(drive, carol):
    finished = _finished(drive)
    step = Step.objects.get(run_id=finished.id, name="echo")
    assert reveal.sealed_fields(step) == ["result"]
    with pytest.raises(reveal.RevealError, match="say why"):
        reveal.reveal(carol, step, "result", "  ")

    value = reveal.reveal(carol, step, "result", "customer asked which key we used")

    assert value == {"api_key": SECRET, "n": 1}
    event = AuditEvent.objects.for_run(finished).get(action="secret.reveal")
    assert event.after == {
        "row": f"step {step.pk}",
        "field": "result",
        "reason": "customer asked which key we used",
    }
    assert SECRET not in json.dumps(event.after)


def test_an_operator_cannot_reveal(drive, bob):
    step = Step.objects.get(run_id=_finished(drive).id, name="echo")
    with pytest.raises(PermissionDenied):
        reveal.reveal(bob, step, "result", "curious")


def test_the_reveal_page_shows_the_value_to_an_admin(drive, client, carol):
    finished = _finished(drive)
    step = Step.objects.get(run_id=finished.id, name="echo")
    client.force_login(carol)
    listing = client.get(f"/runs/{finished.id}/secrets/")
    assert listing.status_code == 200
    assert SECRET not in listing.content.decode()
    url = f"/runs/{finished.id}/secrets/step/{step.pk}/result"
    assert client.post(url, {"reason": ""}).status_code == 400
    shown = client.post(url, {"reason": "audit request 42"})
    assert shown.status_code == 200
    assert SECRET in shown.content.decode()


def test_an_export_carries_ciphertext_and_replays_after_import(drive):
    finished = _finished(drive)
    document = json.loads(json.dumps(exports.export_run(finished)))
    assert SECRET not in json.dumps(document)
    document["run"]["id"] = "imported"
    report = run_services.dry_replay(document)
    assert report.ok and report.ending == "returned"
    assert report.result == {"api_key": SECRET, "n": 1}


def test_retention_shreds_and_the_run_refuses_dry_replay_and_fork(drive):
    finished = _finished(drive)
    retention._redact([finished.id])
    shredded = Run.objects.get(pk=finished.id)
    assert shredded.secrets == ""
    assert not Step.objects.filter(run_id=finished.id).exclude(secrets="").exists()

    report = run_services.dry_replay(shredded)
    assert not report.ok
    assert "shredded" in report.error["message"]
    with pytest.raises(ForkError, match="shredded"):
        from durableruns.engine import replay

        replay.fork(shredded, 1)
