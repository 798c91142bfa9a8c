"""Drop the single-column indexes that a wider index already serves, each written on
every checkpoint:

- the step's and the effect's own run_id index (on Postgres a btree and its
  varchar_pattern_ops twin each), served by their (run, position) indexes: about
  20 us of a 0.13 ms fenced step INSERT, measured with pgbench (docs/benchmarks.md 1b);
- the LangGraph tables' own thread_id index (and twin), served by each table's unique
  constraint, which starts with the thread; and lg_run_id's pair, which becomes one
  plain index (lg_checkpoint_run, for delete_for_runs).

Only the indexes go. Django's own AlterField would also drop and re-add each foreign
key, and re-adding one validates every row under a lock: minutes on a large table.
"""

import django.db.models.deletion
from django.db import migrations, models

COLUMNS = (
    ("durableruns_step", "run_id"),
    ("durableruns_effect", "run_id"),
    ("durableruns_langgraphblob", "thread_id"),
    ("durableruns_langgraphcheckpoint", "thread_id"),
    ("durableruns_langgraphwrite", "thread_id"),
    ("durableruns_langgraphcheckpoint", "lg_run_id"),
)


def _single_column_indexes(schema_editor, table, column):
    """The plain indexes on `column` alone (not a key, a constraint or a wider index)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [
        name
        for name, c in constraints.items()
        if c["index"] and c["columns"] == [column] and not (c["unique"] or c["primary_key"])
    ]


def forward(apps, schema_editor):
    for table, column in COLUMNS:
        for name in _single_column_indexes(schema_editor, table, column):
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def backward(apps, schema_editor):
    for table, column in COLUMNS:
        name = schema_editor.quote_name(f"{table}_{column}_alone")
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({column})")


def _unindexed(to, related_name):
    return models.ForeignKey(
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to=to,
    )


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0011_lz4_payloads")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField("effect", "run", _unindexed("durableruns.run", "effects")),
                migrations.AlterField("step", "run", _unindexed("durableruns.run", "steps")),
                migrations.AlterField(
                    "langgraphblob", "thread", _unindexed("durableruns.langgraphthread", "+")
                ),
                migrations.AlterField(
                    "langgraphcheckpoint", "lg_run_id", models.TextField(blank=True, default="")
                ),
                migrations.AlterField(
                    "langgraphcheckpoint",
                    "thread",
                    _unindexed("durableruns.langgraphthread", "checkpoints"),
                ),
                migrations.AlterField(
                    "langgraphwrite", "thread", _unindexed("durableruns.langgraphthread", "writes")
                ),
            ],
            database_operations=[migrations.RunPython(forward, backward)],
        ),
        migrations.AddIndex(
            model_name="langgraphcheckpoint",
            index=models.Index(fields=["lg_run_id"], name="lg_checkpoint_run"),
        ),
    ]
