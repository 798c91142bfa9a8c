"""Less written per LangGraph checkpoint and per new thread (docs/benchmarks.md):

- Checkpoints, blobs and threads keep their links in Django, without the database's
  foreign key checks. Checkpoints and blobs are inserted under the fence, a lock on
  their Run, which a thread's deletion takes too; a thread is inserted with its Run,
  in the same statement or transaction. Each check locked the parent row again at
  every insert (models.py, above LangGraphCheckpoint). Dropping a constraint rewrites
  and validates nothing.
- Two varchar_pattern_ops indexes that no query uses (no LIKE on a Run's parent or on
  a thread's Run id), written at every Run and thread insert. Their btrees stay.
"""

import django.db.models.deletion
from django.db import migrations, models

PATTERN_TWINS = (
    ("durableruns_run", "parent_id"),
    ("durableruns_langgraphthread", "run_id"),
)
THREAD = "durableruns_langgraphthread"


def _thread_foreign_keys(schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, THREAD)
    return [name for name, c in constraints.items() if c["foreign_key"]]


def drop_thread_foreign_key(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite keeps it: dropping one means rebuilding the table
    for name in _thread_foreign_keys(schema_editor):
        schema_editor.execute(
            f"SET CONSTRAINTS {schema_editor.quote_name(name)} IMMEDIATE; "
            f"ALTER TABLE {THREAD} DROP CONSTRAINT {schema_editor.quote_name(name)}"
        )


def add_thread_foreign_key(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql" or _thread_foreign_keys(schema_editor):
        return
    schema_editor.execute(
        f"ALTER TABLE {THREAD} ADD CONSTRAINT {THREAD}_run_id_fk FOREIGN KEY (run_id) "
        "REFERENCES durableruns_run (id) DEFERRABLE INITIALLY DEFERRED"
    )


def drop_pattern_twins(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, column in PATTERN_TWINS:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
                [table, f"%({column} varchar_pattern_ops)"],
            )
            for (name,) in cursor.fetchall():
                schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def add_pattern_twins(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, column in PATTERN_TWINS:
        name = schema_editor.quote_name(f"{table}_{column}_like")
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({column} varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("durableruns", "0012_single_column_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="langgraphblob",
            name="thread",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="durableruns.langgraphthread",
            ),
        ),
        migrations.AlterField(
            model_name="langgraphcheckpoint",
            name="thread",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="checkpoints",
                to="durableruns.langgraphthread",
            ),
        ),
        # The thread's key is its Run's: Django's AlterField of a primary key would also
        # drop and re-add the foreign keys that point at it (validating every write).
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(drop_thread_foreign_key, add_thread_foreign_key)
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="langgraphthread",
                    name="run",
                    field=models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="langgraph_thread",
                        serialize=False,
                        to="durableruns.run",
                    ),
                ),
            ],
        ),
        migrations.RunPython(drop_pattern_twins, add_pattern_twins),
    ]
