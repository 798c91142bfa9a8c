"""On Postgres the database itself refuses UPDATE and DELETE on the audit log."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION durableruns_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'durableruns_auditevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER durableruns_audit_append_only
    BEFORE UPDATE OR DELETE ON durableruns_auditevent
    FOR EACH ROW EXECUTE FUNCTION durableruns_audit_append_only();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS durableruns_audit_append_only ON durableruns_auditevent;
DROP FUNCTION IF EXISTS durableruns_audit_append_only();
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD, params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
