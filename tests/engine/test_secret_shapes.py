"""The secret shapes issue 22 found stored in clear: key names in any case and
spelling, name/value pairs, passwords said in prose, detector token formats, URL
passwords with any character, cards with dots or double spaces."""

from __future__ import annotations

import pytest

from durableruns.engine.keys import canonical_json
from durableruns.engine.redaction import REDACTED, current_rules, redact, redact_text

pytestmark = [pytest.mark.django_db]

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
CLASSIC_GITHUB = "0123456789abcdef0123456789abcdef01234567"
XAPP = "xapp-1-A0123456789-1234567890123-" + "a1b2c3d4" * 8
GOOGLE = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
HUGGINGFACE = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH"
GITLAB = "glpat-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn"
NPM = "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SENDGRID = "SG." + "a1B2c3D4e5F6g7H8i9J0k1" + "." + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V"
TWILIO = "SK" + "0123456789abcdef0123456789abcdef"
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
OWN_TOKEN = "dr_0123456789ab_" + "Q" * 20 + "-_" + "z" * 21


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ({"DBPassword": "dbpw-0001"}, "dbpw-0001"),
        ({"db_password": "dbpw-0002"}, "dbpw-0002"),
        ({"db-password": "dbpw-0003"}, "dbpw-0003"),
        ({"adminpassword": "adm-0004"}, "adm-0004"),
        ({"APIToken": "apitok-0005"}, "apitok-0005"),
        ({"PassWord": "pw-0006"}, "pw-0006"),
        ({"pwd": "pw-0007"}, "pw-0007"),
        ({"credentials": {"user": "ada", "pin": "cred-0008"}}, "cred-0008"),
        ({"ssh_key": "ssh-0009"}, "ssh-0009"),
        ({"AccountKey": "acct-0010"}, "acct-0010"),
        ({"accessKey": "ak-0011"}, "ak-0011"),
        ({"auth": "auth-0012"}, "auth-0012"),
        ("DBPassword=dbpw-0013&page=2", "dbpw-0013"),
        ("PassWord: pw-0014", "pw-0014"),
        ({"headers": [{"name": "Authorization", "value": "opaque-0015"}]}, "opaque-0015"),
        ({"name": "X-Api-Key", "value": "opaque-0016"}, "opaque-0016"),
        ("the password is hunter2-0017", "hunter2-0017"),
        ("my password is correct horse battery staple", "battery staple"),
        ("password: correct horse battery staple", "battery staple"),
        (f"AWS secret key: {AWS_SECRET}", AWS_SECRET),
        ({"note": f"aws_secret='{AWS_SECRET}'"}, AWS_SECRET),
        (f"github token {CLASSIC_GITHUB}", CLASSIC_GITHUB),
        ("ghp_" + "A1b2_C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7", "C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"),
        (f"slack app {XAPP}", XAPP),
        (f"maps {GOOGLE}", GOOGLE),
        (f"model hub {HUGGINGFACE}", HUGGINGFACE),
        (f"gitlab {GITLAB}", GITLAB),
        (f"registry {NPM}", NPM),
        (f"mail {SENDGRID}", SENDGRID),
        (f"sms {TWILIO}", TWILIO),
        (f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE_KEY};", AZURE_KEY),
        (f"Token {OWN_TOKEN}", OWN_TOKEN),
        ({"next": f"/api/runs/?x={OWN_TOKEN}"}, OWN_TOKEN),
        ("postgres://app:pa/ss@w0rd-0018@db:5432/x", "w0rd-0018"),
        ({"dsn": "redis://u:a/b@c-0019@cache:6379/0"}, "a/b@c-0019"),
        ("card 4111.1111.1111.1111 on file", "4111.1111.1111.1111"),
        ("card 4111  1111  1111  1111 on file", "1111  1111  1111"),
        ({"password": "line-one-0020\nline-two-0020"}, "line-two-0020"),
        ('cfg {"password": "line-one-0021\nline-two-0021"}', "line-two-0021"),
        ('cfg {"password": "esc-0022\\"after-0022"}', "after-0022"),
    ],
)
def test_it_redacts_each_shape_issue_22_found(value, secret):
    assert secret not in str(redact(value))
    # The one-scan screen (how stored values skip the walk) flags each of them.
    assert current_rules().flags(canonical_json(value))


def test_a_url_password_with_a_slash_keeps_the_scheme_user_and_host():
    redacted = redact_text("postgres://app:pa/ss@w0rd@db:5432/x")
    assert redacted == f"postgres://app:{REDACTED}@db:5432/x"


def test_a_pair_keeps_the_name_and_the_other_fields():
    pair = {"name": "Authorization", "value": "opaque", "type": "header"}
    assert redact(pair) == {"name": "Authorization", "value": REDACTED, "type": "header"}


@pytest.mark.parametrize(
    "value",
    [
        {"name": "order_id", "value": "A-1001"},
        {"max_tokens": 512, "author": "ada", "compass": "north"},
        "the order is on its way; status: shipped",
        "release 1.2.3.4 built at 2026-12-02",
    ],
)
def test_it_keeps_look_alikes_that_are_not_secrets(value):
    assert redact(value) is value


# --- The fast canary: every shape above through a real run, to every surface --------

CANARY = {
    "keys": {"DBPassword": "c-0001", "adminpassword": "c-0002", "APIToken": "c-0003"},
    "more": {"PassWord": "c-0004", "pwd": "c-0005", "ssh_key": "c-0006", "auth": "c-0007"},
    "azure": {"AccountKey": "c-0008", "accessKey": "c-0009", "credentials": "c-0010"},
    "headers": [{"name": "Authorization", "value": "c-0011"}],
    "said": "the password is c-0012",
    "multiline": {"password": "c-0013\nc-0014"},
    "tokens": f"{XAPP} {GOOGLE} {HUGGINGFACE} {GITLAB} {NPM} {SENDGRID} {TWILIO}",
    "text": f"aws key: {AWS_SECRET} github token {CLASSIC_GITHUB} Token {OWN_TOKEN}",
    "url": "postgres://app:c-00/15@x@db:5432/x",
    "cards": "4111.1111.1111.1111 and 4111  1111  1111  1111",
}
CANARY_SECRETS = [
    *(f"c-00{n:02d}" for n in range(1, 15)),
    "00/15@x",
    AWS_SECRET,
    XAPP,
    GOOGLE,
    HUGGINGFACE,
    GITLAB,
    NPM,
    SENDGRID,
    TWILIO,
    CLASSIC_GITHUB,
    OWN_TOKEN,
    "4111.1111.1111.1111",
    "4111  1111  1111  1111",
]


@pytest.mark.django_db(transaction=True)
def test_no_shape_reaches_the_api_the_pages_exports_or_the_audit_after_retention(
    drive, client, carol
):
    import json

    from durableruns.engine import vault
    from durableruns.engine.runs import start_run
    from durableruns.models import AuditEvent, Run
    from durableruns.services import audit, exports, retention

    run, _ = start_run("t-echo-twice", {"value": CANARY}, run_id="canary-22")
    finished = drive(run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    # Exact replay: the executor gets the originals back.
    assert vault.unseal(finished.secrets)["input"]["value"] == CANARY
    audit.record(carol, "run.note", finished, after={"input": CANARY})
    client.force_login(carol)
    surfaces = {
        "api": client.get(f"/api/runs/{run.id}/").content.decode(),
        "html": client.get(f"/runs/{run.id}/").content.decode(),
        "export": json.dumps(exports.export_run(finished)),
        "audit": json.dumps(list(AuditEvent.objects.values_list("before", "after"))),
    }
    assert "canary-22" in surfaces["api"] and "canary-22" in surfaces["html"]
    leaks = {where: [s for s in CANARY_SECRETS if s in text] for where, text in surfaces.items()}
    assert leaks == {"api": [], "html": [], "export": [], "audit": []}

    retention._redact([run.id])
    after = list(AuditEvent.objects.filter(target_id=run.id).values_list("after", flat=True))
    assert after and all(value in (None, retention.REDACTED_PAYLOAD) for value in after)


# --- A bare AWS secret key: told from a digest by the access key id beside it --------

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize(
    "text",
    [
        f"{AWS_KEY_ID} {AWS_SECRET}",
        f"{AWS_KEY_ID}:{AWS_SECRET}",
        f"Access key ID,Secret access key\n{AWS_KEY_ID},{AWS_SECRET}\n",
        f"creds {AWS_SECRET} for {AWS_KEY_ID}",
        f"id {AWS_KEY_ID}, and here it is, as you asked yesterday: {AWS_SECRET}",
        f"export AWS_ACCESS_KEY_ID={AWS_KEY_ID} AWS_SECRET=/{AWS_SECRET}/",
    ],
)
def test_it_redacts_a_bare_aws_secret_key_beside_its_access_key_id(text):
    # Old code: the id was redacted and the secret, with no "aws…key" before it, kept.
    redacted = redact_text(text)
    assert AWS_SECRET not in redacted and AWS_KEY_ID not in redacted
    assert current_rules().flags(canonical_json(text))


@pytest.mark.parametrize(
    "text",
    [
        f"commit {CLASSIC_GITHUB} and {AWS_SECRET}",  # 40 characters, no key id near
        f"{AWS_KEY_ID} " + "x" * 200 + f" {AWS_SECRET}",  # too far from the id
        f"{AWS_KEY_ID} {AWS_SECRET}Z",  # 41 characters: not a secret key's length
    ],
)
def test_a_forty_character_word_away_from_a_key_id_is_kept(text):
    assert AWS_SECRET in redact_text(text)


def test_the_pair_keeps_the_words_between_id_and_secret():
    redacted = redact_text(f"id {AWS_KEY_ID} then {AWS_SECRET} end")
    assert redacted == f"id {REDACTED} then {REDACTED} end"


@pytest.mark.parametrize(
    "make",
    [
        lambda n: (AWS_KEY_ID + " ") * (n // 21),  # every id opens a window
        lambda n: (AWS_KEY_ID + " " + "a" * 39 + " ") * (n // 61),  # near-miss lengths
        lambda n: AWS_KEY_ID + " " + "A/" * (n // 2),  # one long run after an id
    ],
)
def test_the_pair_rule_stays_linear_on_a_megabyte(make):
    """A functional bound, not a timing: RE2 runs the pair rule (no backtracking), and
    a megabyte of windows comes back whole, its ids redacted. The time per size is in
    the benchmark (benchmarks/step_sizes.py, redaction_ms)."""
    text = make(1_000_000)
    redacted = redact_text(text)
    assert AWS_KEY_ID not in redacted and len(redacted) >= len(text) // 2
