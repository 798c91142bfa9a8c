"""Every guarantee's one-line break, and the fast test that must fail on it.

Run from a checkout: `python tests/pin_mutations.py`. It clones HEAD to a scratch
directory, applies each break there in turn (never to this checkout), runs the named
fast tests (those `make test-fast` selects) with this checkout's venv, and prints
"caught" or "MISSED" per guarantee; it exits non-zero if any break is missed. It needs
the same Postgres and Redis as `make test` (DATABASE_URL/REDIS_URL, or the Makefile's
defaults). Add a line to MUTATIONS with every guarantee you pin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# (the guarantee, the file, the line as it is, the line broken, the fast tests that pin it)
MUTATIONS = [
    (
        "the fence reads the run row FOR SHARE",
        "durableruns/engine/store.py",
        'return "%s::jsonb", " FOR SHARE"',
        'return "%s::jsonb", ""',
        "tests/engine/test_fence_race.py",
    ),
    (
        "retention re-checks each row under its lock",
        "durableruns/services/retention.py",
        'rows = rows.select_for_update(skip_locked=True, of=("self",))',
        "pass",
        "tests/admin/test_retention_race.py",
    ),
    (
        "the sweep leader runs its scheduled jobs",
        "durableruns/services/sweeper.py",
        "                job()",
        "                pass",
        "tests/test_sweep_leader.py tests/web/test_idempotency.py tests/admin/test_retention.py",
    ),
    (
        "logins count the username as authentication sees it",
        "durableruns/web/login_throttle.py",
        'name = unicodedata.normalize("NFKC", username.strip()).strip()',
        "name = username",
        "tests/admin/test_login_throttle.py",
    ),
    (
        "an unsafe write started and unrecorded is escalated, never called again",
        "durableruns/engine/context.py",
        'self._escalate("the call was started but its outcome was never recorded")',
        "return _CALL_AGAIN",
        "tests/engine/test_crash_recovery.py",
    ),
    (
        "card numbers in free text are masked",
        "durableruns/secret_text.py",
        "data = _CARD.sub(_mask_card, data)",
        "pass",
        "tests/engine/test_redaction.py",
    ),
    (
        "a decision's doorbell rings after its transaction commits",
        "durableruns/engine/doorbell.py",
        "transaction.on_commit(lambda: _publish(run_id, countdown))",
        "_publish(run_id, countdown)",
        "tests/web/test_decision_doorbell.py",
    ),
    (
        "the embedded broker's reader never sees a half-written message",
        "durableruns/broker.py",
        'descriptor, partial = tempfile.mkstemp(dir=folder, prefix=".", suffix=".partial")',
        "partial = os.path.join(folder, name); descriptor = os.open(partial, os.O_CREAT | 1)",
        "tests/deploy/test_embedded_broker.py",
    ),
    (
        "crashtest spawns no worker once its cluster stops",
        "durableruns/testing/crashtest/cluster.py",
        "                    if self._stop.is_set():\n                        return\n",
        "",
        "tests/engine/test_crashtest_cluster.py",
    ),
    (
        "an ignored approval approves nothing",
        "durableruns/services/approvals.py",
        '"ignore": State.IGNORED}',
        '"ignore": State.APPROVED}',
        "tests/engine/test_approvals.py",
    ),
    (
        "a person's cancel or fork says why",
        "durableruns/services/runs.py",
        'if not reason or len(reason) > REASON_MAX or "\\x00" in reason:',
        "if False:",
        "tests/web/test_run_page.py tests/api/test_api_runs.py",
    ),
    (
        "an agent's input schema is checked before a run is stored",
        "durableruns/engine/runs.py",
        "    agent.check_input(run_input)",
        "    pass",
        "tests/web/test_start_run.py",
    ),
    (
        "a saved view is deleted by its owner only",
        "durableruns/web/saved_views.py",
        "    view = get_object_or_404(SavedView, pk=pk, owner=request.user)",
        "    view = get_object_or_404(SavedView, pk=pk)",
        "tests/web/test_saved_views.py",
    ),
    (
        "a person is shown only their own saved views",
        "durableruns/web/saved_views.py",
        '    views = SavedView.objects.filter(owner=user).order_by("name")',
        '    views = SavedView.objects.order_by("name")',
        "tests/web/test_saved_views.py",
    ),
    (
        "a person's time on an escalation is outside the run's time budget",
        "durableruns/engine/context.py",
        '        outside += getattr(record, "escalated_seconds", 0.0)',
        "        outside += 0.0",
        "tests/engine/test_escalation_budget.py",
    ),
    (
        "a redaction rule's preview runs the pattern on RE2, in linear time",
        "durableruns/services/redaction_preview.py",
        "    pattern = compile_pattern(rule)",
        '    pattern = __import__("re").compile(rule)',
        "tests/admin/test_policy_pages.py",
    ),
    (
        "retention records each run it redacts or deletes in the audit log",
        "durableruns/services/retention.py",
        "            _audit(policy, ids)",
        "            pass",
        "tests/admin/test_retention_audit.py",
    ),
    (
        "a fork's edited input is dry-run over the reused steps before forking",
        "durableruns/web/actions.py",
        '            context["dry_run"] = fork_dry_run(record, position, edited)',
        "            pass",
        "tests/web/test_replay_fork_pages.py",
    ),
    (
        "the sweep cancels a child whose parent ended without it",
        "durableruns/services/sweeper.py",
        "    run_actions.cancel_orphans(batch)",
        "    pass",
        "tests/engine/test_children.py",
    ),
    (
        "a child whose outcome its parent recorded is no orphan",
        "durableruns/services/runs.py",
        "        .exclude(Exists(recorded))",
        "",
        "tests/engine/test_children.py",
    ),
    (
        "a child's cancel locks its parent before the child",
        "durableruns/services/runs.py",
        'list(Run.objects.select_for_update().filter(pk=run.parent_run_id).values("pk"))',
        "pass",
        "tests/engine/test_children.py",
    ),
    (
        "one thread of a process reloads the redaction rules",
        "durableruns/secret_text.py",
        'LOCAL_TTL_SECONDS or _local["reloading"]',
        "LOCAL_TTL_SECONDS",
        "tests/engine/test_redaction.py",
    ),
    (
        "a tool given as a branch of run.parallel is refused before it runs",
        "durableruns/engine/parallel.py",
        "    if isinstance(tool, Tool):",
        "    if False:",
        "tests/engine/test_parallel.py",
    ),
    (
        "a changed inbox poll reads the inbox version once",
        "durableruns/web/approvals.py",
        '        "live_version": next_version,',
        '        "live_version": live.inbox_version([a.pk for a in new])[0],',
        "tests/web/test_inbox_live.py",
    ),
    (
        "the redaction rules come from Postgres when Redis does not answer",
        "durableruns/secret_text.py",
        '        log.warning("redaction rules: Redis unavailable, reading them from the database")',
        "        raise",
        "tests/web/test_cache_faults.py",
    ),
    (
        "a rules entry in Redis that this code did not write is ignored",
        "durableruns/secret_text.py",
        "    if not isinstance(stored, list) or not all(_is_rule(pair) for pair in stored):",
        "    if stored is None:",
        "tests/web/test_cache_faults.py",
    ),
    (
        "a login whose attempt counters are unreachable is refused (503), not let through",
        "durableruns/web/login_throttle.py",
        '        return _throttled(request, "unavailable", UNAVAILABLE_RETRY_SECONDS)',
        "        return _login_view(request)  # fail open",
        "tests/web/test_cache_faults.py",
    ),
    (
        "a rules copy read before a change committed is not taken after it",
        "durableruns/apps.py",
        "            transaction.on_commit(rules_changed)",
        "            pass",
        "tests/engine/test_redaction_rules_shared.py",
    ),
    (
        "the shared rules entry never takes the key the previous version reads",
        "durableruns/secret_text.py",
        'CACHE_KEY = "durableruns:redaction-rules:v2"',
        'CACHE_KEY = "durableruns:redaction-rules"',
        "tests/engine/test_redaction_rules_shared.py",
    ),
    (
        "a request whose body ends before its Content-Length is refused, claiming no key",
        "durableruns/validation.py",
        "    if received < expected:",
        "    if False:",
        "tests/web/test_idempotency.py",
    ),
    (
        "changed inbox polls at one version count the pending approvals once",
        "durableruns/web/live.py",
        "    if seen == version:",
        "    if False:",
        "tests/web/test_inbox_live.py",
    ),
    (
        "a request reads its user's permissions in one query",
        "durableruns/roles.py",
        "        user._perm_cache = _permissions(user)",
        "        pass",
        "tests/security/test_permission_reads.py",
    ),
    (
        "the sweep probes every live process, however many runs are in flight",
        "durableruns/engine/store.py",
        'processes = live.exclude(process__isnull=True).exclude(process="")',
        'processes = live.exclude(process__isnull=True).filter(pk__in=running.values("pk")[:500])',
        "tests/engine/test_dead_owners.py",
    ),
    (
        "a long run's page reads a window's worth of its steps, whatever the plan",
        "durableruns/web/step_window.py",
        "steps_qs.filter(position__gte=top - SPAN).order_by(",
        "steps_qs.order_by(",
        "tests/web/test_run_page.py",
    ),
]


def main() -> int:
    env = {
        **os.environ,
        "DATABASE_URL": os.environ.get(
            "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durableruns_mutations"
        ),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/12"),
    }
    python = HERE / ".venv" / "bin" / "python"
    missed = 0
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "checkout"
        subprocess.run(["git", "clone", "-q", str(HERE), str(root)], check=True)
        for what, path, old, new, tests in MUTATIONS:
            target = root / path
            text = target.read_text()
            if old not in text:
                print(f"STALE    {what}: the line to break is no longer in {path}")
                missed += 1
                continue
            target.write_text(text.replace(old, new, 1))
            command = [str(python), "-m", "pytest", "-q", "-x", *tests.split()]
            result = subprocess.run(
                [*command, "-m", "not chaos and not e2e and not scale"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            target.write_text(text)
            caught = result.returncode != 0
            missed += not caught
            print(f"{'caught' if caught else 'MISSED'}   {what} ({path})", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
