"""Indexes for the operators' runs list on Postgres: JSON containment on the input,
and substring search in error messages (trigrams). Run-id prefix search needs none:
Django already gives the primary key a varchar_pattern_ops index.

Postgres-only SQL, so the model state is unchanged and SQLite (the demo) skips it.
pg_trgm needs CREATE privilege on the database; where it cannot be created the
error filter still works, by scanning."""

import logging

from django.db import DatabaseError, migrations, transaction

log = logging.getLogger(__name__)

INDEXES = """
CREATE INDEX IF NOT EXISTS run_input_gin ON durableruns_run USING gin (input jsonb_path_ops);
"""
TRIGRAMS = """
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX IF NOT EXISTS run_error_message ON durableruns_run
    USING gin (upper(error ->> 'message') gin_trgm_ops) WHERE error IS NOT NULL;
"""
BACKWARD = """
DROP INDEX IF EXISTS run_input_gin;
DROP INDEX IF EXISTS run_error_message;
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(INDEXES, params=None)
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute(TRIGRAMS, params=None)
    except DatabaseError as exc:  # no privilege for the extension: search by scanning
        log.warning("no trigram index for error search: %s", exc)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0004_sweeper")]
    operations = [migrations.RunPython(forward, backward)]
