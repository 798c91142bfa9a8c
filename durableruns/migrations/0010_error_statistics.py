"""Statistics on the error message the runs list searches (Postgres 14 and later).

Without them the planner guesses how many runs an error-text filter matches (a fixed
100) and always takes the trigram index, then sorts every match by creation time: for
a common text ("declined", 17,000 of 1,000,000 runs) that reads 17,000 heap pages,
140 ms. With them it knows the share and walks the run_created index newest first,
stopping at the page's 51st match (1 ms); a rare text still takes the trigram index.
The expression is the trigram index's (0005_operators), which the filter matches."""

from django.db import migrations

STATISTICS = """
CREATE STATISTICS IF NOT EXISTS run_error_message_stats
    ON (upper(error ->> 'message')) FROM durableruns_run;
ANALYZE durableruns_run;
"""
BACKWARD = "DROP STATISTICS IF EXISTS run_error_message_stats;"


def forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql" and connection.pg_version >= 140000:
        schema_editor.execute(STATISTICS, params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0009_attempt_times")]
    operations = [migrations.RunPython(forward, backward)]
