"""The audit log stays append-only, with one exception: retention may replace an event's
`before` and `after` with its marker (services/retention.py), so a run's data does not
outlive the run in its history. Who did what, to which target and when never changes,
and an event is never deleted."""

from django.db import migrations

MARKER = '"[REDACTED by retention]"'
FORWARD = f"""
CREATE OR REPLACE FUNCTION durableruns_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND to_jsonb(NEW) - 'before' - 'after' = to_jsonb(OLD) - 'before' - 'after'
       AND (NEW.before IS NOT DISTINCT FROM OLD.before OR NEW.before = '{MARKER}'::jsonb)
       AND (NEW.after IS NOT DISTINCT FROM OLD.after OR NEW.after = '{MARKER}'::jsonb)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'durableruns_auditevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
"""
BACKWARD = """
CREATE OR REPLACE FUNCTION durableruns_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'durableruns_auditevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0014_run_tokens_cost")]
    operations = [migrations.RunPython(forward, backward)]
