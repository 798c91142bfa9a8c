"""Drop the LangGraph tables' own single-column indexes on thread_id (a btree and its
varchar_pattern_ops twin each: the unique constraints lead with thread_id and serve
every lookup by thread) and on lg_run_id (its pattern-ops twin too), each written on
every checkpoint; lg_run_id gets one plain index back, lg_checkpoint_run.

As in 0012, only the indexes go: Django's own AlterField would also drop and re-add
each foreign key, and re-adding one validates every row under a lock.
"""

import django.db.models.deletion
from django.db import migrations, models

COLUMNS = (
    ("durableruns_langgraphblob", "thread_id"),
    ("durableruns_langgraphcheckpoint", "thread_id"),
    ("durableruns_langgraphwrite", "thread_id"),
    ("durableruns_langgraphcheckpoint", "lg_run_id"),
)


def _single_column_indexes(schema_editor, table, column):
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


def _thread(related_name):
    return models.ForeignKey(
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to="durableruns.langgraphthread",
    )


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0012_run_indexes_led_by_position")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField("langgraphblob", "thread", _thread("+")),
                migrations.AlterField(
                    "langgraphcheckpoint", "lg_run_id", models.TextField(blank=True, default="")
                ),
                migrations.AlterField("langgraphcheckpoint", "thread", _thread("checkpoints")),
                migrations.AlterField("langgraphwrite", "thread", _thread("writes")),
            ],
            database_operations=[migrations.RunPython(forward, backward)],
        ),
        migrations.AddIndex(
            model_name="langgraphcheckpoint",
            index=models.Index(fields=["lg_run_id"], name="lg_checkpoint_run"),
        ),
    ]
