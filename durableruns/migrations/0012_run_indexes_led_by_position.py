"""Drop the step's and the effect's own indexes on run_id (on Postgres a btree and
its varchar_pattern_ops twin each): the (run, position) indexes lead with run_id and
serve every lookup by run, while each index cost a write on every checkpoint (about
20 us of a 0.13 ms fenced step INSERT, measured with pgbench; docs/benchmarks.md 1b).

Only the indexes go. Django's own AlterField would also drop and re-add the foreign
key, and re-adding it validates every row under a lock: minutes on a large table.
"""

import django.db.models.deletion
from django.db import migrations, models

TABLES = ("durableruns_step", "durableruns_effect")


def _run_id_indexes(schema_editor, table):
    """The plain indexes on run_id alone (not the key, the constraints or (run, position))."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [
        name
        for name, c in constraints.items()
        if c["index"] and c["columns"] == ["run_id"] and not (c["unique"] or c["primary_key"])
    ]


def forward(apps, schema_editor):
    for table in TABLES:
        for name in _run_id_indexes(schema_editor, table):
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def backward(apps, schema_editor):
    for table in TABLES:
        name = schema_editor.quote_name(f"{table}_run_id_by_run")
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} (run_id)")


def _unindexed_run(related_name):
    return models.ForeignKey(
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to="durableruns.run",
    )


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0011_lz4_payloads")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField("effect", "run", _unindexed_run("effects")),
                migrations.AlterField("step", "run", _unindexed_run("steps")),
            ],
            database_operations=[migrations.RunPython(forward, backward)],
        )
    ]
