"""Child runs (engine/children.py): a run's parent run and the parent's step position,
the `awaiting_child` status and the `child` step kind.

The link keeps its btree (the runs list filters by parent, the wake reads a parent's
children) but not Django's varchar_pattern_ops twin: no query uses LIKE on it, and
it would be written at every run insert (as 0013 did for `parent`).
"""

import django.db.models.deletion
from django.db import migrations, models

TABLE = "durableruns_run"
COLUMN = "parent_run_id"


def drop_pattern_twin(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            [TABLE, f"%({COLUMN} varchar_pattern_ops)"],
        )
        for (name,) in cursor.fetchall():
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


class Migration(migrations.Migration):
    dependencies = [
        ("durableruns", "0015_audit_retention_scrub"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="parent_position",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="parent_run",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="children",
                to="durableruns.run",
            ),
        ),
        migrations.RunPython(drop_pattern_twin, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("waiting", "Waiting"),
                    ("awaiting_approval", "Awaiting Approval"),
                    ("awaiting_child", "Awaiting Child"),
                    ("escalated", "Escalated"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="kind",
            field=models.CharField(
                choices=[
                    ("llm", "Llm"),
                    ("tool", "Tool"),
                    ("compute", "Compute"),
                    ("approval", "Approval"),
                    ("sleep", "Sleep"),
                    ("child", "Child"),
                ],
                max_length=10,
            ),
        ),
    ]
