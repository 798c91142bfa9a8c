"""Agents for the secrets canary test, loaded by workers through
DURABLERUNS_AGENT_MODULES=durableruns.demo.agents,tests.agents_canary.

The secrets come from the worker's environment (CANARY_SECRETS, a JSON object),
as real credentials would: agent code puts them in tool arguments, gets them back
in tool results and model replies, and sees them in exception messages. Each one
looks like a secret to the redactor (a secret key name, a built-in value pattern,
or a pattern an admin added), which is the redactor's contract.
"""

from __future__ import annotations

import json
import logging
import os

import httpx
from django.conf import settings

import durableruns as dr

log = logging.getLogger("tests.agents_canary")


def secrets() -> dict[str, str]:
    return json.loads(os.environ.get("CANARY_SECRETS", "{}"))


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def issue_token(account: str, password: str, headers: dict, *, idempotency_key: str) -> dict:
    expected = secrets()
    # The tool really received the secrets: redaction happens only on the way to storage.
    if password != expected["arg_password"] or headers["authorization"] != (
        f"Bearer {expected['arg_bearer']}"
    ):
        raise dr.PermanentError("the tool did not receive the real credentials")
    return {
        "access_token": expected["result_token"],
        "note": f"issued {expected['result_pattern']} for {account}",
        "verified": True,
    }


def shapes() -> dict:
    """Every secret shape of issue 11, built from the canaries (see the test)."""
    s = secrets()
    return {
        "accessToken": s["camel_access"],
        "clientSecret": s["camel_client"],
        "privateKey": s["camel_private"],
        "aws_secret_access_key": s["aws_secret"],
        "env": f"aws_secret_access_key={s['aws_secret_text']}",
        "card": int(s["card_number"]),
        "header": f"Authorization: Basic {s['basic_auth']}",
        "config": f"password = '{s['multiword_password']}'",
        "github": f"pushed with {s['github']}",
        "slack": f"notified via {s['slack']}",
        "dsn": f"postgres://app:{s['db_password']}@db.internal:5432/app",
        "pem": (f"-----BEGIN PRIVATE KEY-----\n{s['pem_body']}\n-----END PRIVATE KEY-----"),
        "jwt": f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.{s['jwt_signature']}",
        **shapes_22(s),
    }


def shapes_22(s: dict[str, str]) -> dict:
    """Every secret shape of issue 22."""
    keys = {name[4:]: value for name, value in s.items() if name.startswith("key_")}
    return {
        "keys": keys,
        "headers": [{"name": "Authorization", "value": s["pair_value"]}],
        "said": f"the password is {s['said_password']}",
        "said_multiword": f"password: correct horse {s['said_tail']} staple",
        "multiline": {"password": s["multiline_password"]},
        "aws": f"AWS secret key: {s['aws_context']}",
        "github_classic": f"github token {s['github_classic']}",
        "tokens": " ".join(
            s[name]
            for name in ("xapp", "google", "huggingface", "gitlab", "npm", "sendgrid", "twilio")
        ),
        "azure": f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s['azure_key']};",
        "url": f"postgres://app:{s['url_password']}@db.internal:5432/app",
        "cards": f"on file: {s['card_dots']} and {s['card_spaces']}",
        "own_token": f"Token {s['own_token']}",
    }


@dr.tool(kind=dr.READ_ONLY)
def check_shapes(payload: dict, *, idempotency_key: str) -> dict:
    """Receives every shape as agent code sent it, and returns them all."""
    if payload != shapes():
        raise dr.PermanentError("the tool did not receive the real secret shapes")
    s = secrets()
    # A query string with secrets, in the worker's httpx log line.
    httpx.get(
        f"{settings.DURABLERUNS_PROVIDER_URL}/healthz",
        params={"api_key": s["query_key"], "password": s["query_password"]},
        timeout=10,
    )
    return {"echo": payload, "received": True}


@dr.tool(kind=dr.READ_ONLY)
def flaky_upstream(account: str, *, idempotency_key: str) -> dict:
    raise dr.PermanentError(f"upstream refused key {secrets()['exception_key']} for {account}")


@dr.agent("canary-bot", version="1", max_steps=10)
def canary_bot(run: dr.Run, task: dict) -> dict:
    s = secrets()
    log.warning("connecting with password=%s and %s", s["arg_password"], s["model_secret"])
    issued = run.call(
        issue_token,
        account=task["account"],
        password=s["arg_password"],
        headers={"authorization": f"Bearer {s['arg_bearer']}"},
    )
    reply = run.llm(
        "confirm",
        messages=[
            {
                "role": "user",
                "content": f"confirm access_token={issued['access_token']} {s['model_secret']}",
            },
        ],
    )
    checked = run.call(check_shapes, payload=shapes())
    try:
        run.call(flaky_upstream, account=task["account"])
    except dr.PermanentError as exc:
        try:
            raise RuntimeError(f"wrapped: {exc}") from exc
        except RuntimeError:
            log.exception("upstream failed with %s", s["exception_key"])
    return {
        "verified": issued["verified"],
        "confirmed": s["model_secret"] in reply,
        "token": issued["access_token"],
        "shapes_received": checked["received"] and checked["echo"] == shapes(),
    }


@dr.agent("canary-fail", version="1", max_steps=5)
def canary_fail(run: dr.Run, task: dict) -> dict:
    s = secrets()
    run.step("prepare", lambda: {"api_key": s["arg_password"]})
    raise RuntimeError(f"gave up; token={s['fail_token']} card {s['fail_card']}")
