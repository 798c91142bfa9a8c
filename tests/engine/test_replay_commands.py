"""replay, exportrun and importrun: a production run debugged on another database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.models import Effect, Run, Step
from tests.conftest import ROOT
from tests.engine.recorded import asks_for_another_order, deploy, finished_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("rung")]


def _export(run_id: str, path) -> dict:
    out = StringIO()
    call_command("exportrun", run_id, stdout=out)
    path.write_text(out.getvalue())
    return json.loads(out.getvalue())


def _replay(*args: str) -> str:
    out = StringIO()
    call_command("replay", *args, stdout=out)
    return out.getvalue()


def _flush() -> None:
    call_command("flush", "--no-input", verbosity=0)


def test_it_replays_an_exported_run_on_a_fresh_database(provider_url, tmp_path):
    finished_run()
    _export("recorded", tmp_path / "run.json")
    _flush()
    assert not Run.objects.exists()
    output = _replay("--file", str(tmp_path / "run.json"))
    assert "#2   replayed      tool 'refund'" in output
    assert "OK: 5 steps replayed; agent code returned" in output
    assert (Run.objects.count(), ProviderCall.objects.count(), ModelCall.objects.count()) == (
        0,
        0,
        0,
    )


def test_it_replays_a_stored_run_by_id(provider_url):
    finished_run()
    assert "OK: 5 steps replayed" in _replay("recorded")


def test_a_divergence_fails_the_command_and_names_the_step(provider_url, monkeypatch):
    finished_run()
    deploy(monkeypatch, asks_for_another_order)
    out = StringIO()
    with pytest.raises(CommandError, match="DIVERGED at step 1: non-determinism at step 1"):
        call_command("replay", "recorded", stdout=out)
    assert "expected: tool step 'lookup_order'" in out.getvalue()


def test_a_divergence_exits_non_zero_from_the_shell(provider_url, tmp_path):
    doc = _export(finished_run().id, tmp_path / "run.json")
    doc["steps"][3]["fingerprint"] = "0" * 16  # history that today's code cannot produce
    (tmp_path / "changed.json").write_text(json.dumps(doc))
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "replay", "--file", str(tmp_path / "changed.json")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "DIVERGED at step 3" in done.stderr
    assert "#3   diverged      tool 'send_email'" in done.stdout


def test_it_refuses_a_file_that_is_not_an_export(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"format": 1, "run": {"id": "x"}}))
    with pytest.raises(CommandError, match="run: missing field 'agent'"):
        _replay("--file", str(tmp_path / "bad.json"))
    with pytest.raises(CommandError, match="give either RUN_ID or --file"):
        _replay()


def test_export_then_import_recreates_the_run_on_another_database(provider_url, tmp_path):
    finished_run()
    before = _export("recorded", tmp_path / "run.json")
    _flush()
    out = StringIO()
    call_command("importrun", str(tmp_path / "run.json"), stdout=out)
    assert out.getvalue().strip() == "recorded"
    after = _export("recorded", tmp_path / "again.json")
    for doc in (before, after):
        doc.pop("audit")
        for effect in doc["effects"]:
            effect.pop("id")  # row ids are local to a database
    assert after == before
    assert "OK: 5 steps replayed" in _replay("recorded")


def test_importing_the_same_run_twice_changes_nothing(provider_url, tmp_path):
    finished_run()
    _export("recorded", tmp_path / "run.json")
    _flush()
    call_command("importrun", str(tmp_path / "run.json"), stdout=StringIO())
    err = StringIO()
    call_command("importrun", str(tmp_path / "run.json"), stdout=StringIO(), stderr=err)
    assert "already exists; nothing imported" in err.getvalue()
    assert (Run.objects.count(), Step.objects.count(), Effect.objects.count()) == (1, 5, 2)


def test_it_refuses_a_different_run_under_an_existing_id(provider_url, tmp_path):
    doc = _export(finished_run().id, tmp_path / "run.json")
    doc["run"]["input"]["order_id"] = "A-2002"
    (tmp_path / "other.json").write_text(json.dumps(doc))
    with pytest.raises(CommandError, match="a different run recorded already exists"):
        call_command("importrun", str(tmp_path / "other.json"), stdout=StringIO())


def test_an_imported_queued_run_waits_for_an_operator(provider_url, tmp_path):
    doc = _export(finished_run().id, tmp_path / "run.json")
    _flush()
    doc["run"]["status"] = "running"
    (tmp_path / "running.json").write_text(json.dumps(doc))
    call_command("importrun", str(tmp_path / "running.json"), stdout=StringIO())
    assert Run.objects.get(pk="recorded").status == Run.Status.WAITING


def test_failed_attempt_times_travel_with_an_export_and_bad_ones_are_refused(
    provider_url, tmp_path
):
    doc = _export(finished_run().id, tmp_path / "run.json")
    times = [["2026-12-01T07:00:00+00:00", "2026-12-01T07:00:01+00:00"]]
    doc["steps"][1]["attempt_times"] = times
    _flush()
    (tmp_path / "timed.json").write_text(json.dumps(doc))
    call_command("importrun", str(tmp_path / "timed.json"), stdout=StringIO())
    assert Step.objects.get(run_id="recorded", position=1).attempt_times == times
    assert _export("recorded", tmp_path / "again.json")["steps"][1]["attempt_times"] == times
    _flush()
    doc["steps"][1]["attempt_times"] = [["2026-12-01T07:00:00+00:00"], 5]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(CommandError, match="attempt_times"):
        call_command("importrun", str(tmp_path / "bad.json"), stdout=StringIO())
    assert not Run.objects.exists()
