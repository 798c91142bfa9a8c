"""Revealing a sealed value needs a reason someone can later read (a few words, not
"x"), and the page that shows the plaintext is never stored by a browser or proxy."""

from __future__ import annotations

import pytest

from durableruns.models import AuditEvent, Step
from durableruns.services import reveal
from tests.engine.test_secrets_at_rest import SECRET, _finished

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("reason", ["x", "because", "why not", "a b c d", "ok ok ok"])
def test_a_reveal_refuses_a_reason_of_less_than_a_few_words(drive, client, carol, reason):
    finished = _finished(drive)
    step = Step.objects.get(run_id=finished.id, name="echo")
    client.force_login(carol)
    response = client.post(f"/runs/{finished.id}/secrets/step/{step.pk}/result", {"reason": reason})
    assert response.status_code == 400
    assert "at least 3 words" in response.content.decode()
    assert SECRET not in response.content.decode()
    assert not AuditEvent.objects.for_run(finished).filter(action="secret.reveal").exists()


def test_the_service_refuses_a_one_word_reason_too(drive, carol):
    step = Step.objects.get(run_id=_finished(drive).id, name="echo")
    with pytest.raises(reveal.RevealError, match="at least 3 words"):
        reveal.reveal(carol, step, "result", "x")


def test_the_page_showing_the_plaintext_is_not_stored(drive, client, carol):
    finished = _finished(drive)
    step = Step.objects.get(run_id=finished.id, name="echo")
    client.force_login(carol)
    shown = client.post(
        f"/runs/{finished.id}/secrets/step/{step.pk}/result",
        {"reason": "customer asked which key we used"},
    )
    assert shown.status_code == 200 and SECRET in shown.content.decode()
    assert "no-store" in shown["Cache-Control"]


def test_the_run_page_links_admins_to_the_sealed_values_shown_as_json(drive, client, carol, bob):
    finished = _finished(drive)
    client.force_login(bob)
    assert "Sealed secrets of this run" not in client.get(f"/runs/{finished.id}/").content.decode()
    client.force_login(carol)
    page = client.get(f"/runs/{finished.id}/").content.decode()
    assert f'href="/runs/{finished.id}/secrets/"' in page
    sealed = client.get(f"/runs/{finished.id}/secrets/").content.decode()
    assert "&quot;[REDACTED]&quot;" in sealed or "[REDACTED]" in sealed
    assert "{&#x27;" not in sealed and SECRET not in sealed  # JSON, never a Python repr
