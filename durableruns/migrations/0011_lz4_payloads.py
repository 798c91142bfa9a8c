"""Compress large payloads with LZ4 instead of pglz (Postgres 14 and later).

Postgres compresses a value once its row passes about 2 KB, with pglz unless told
otherwise, and every step checkpoint pays that on the write path: a 20 KB result
cost 1.12 ms to INSERT with pglz and 0.77 ms with LZ4 (2 KB: 0.45 and 0.32 ms;
docs/benchmarks.md, section 1b). LZ4 compresses a little less and decompresses
faster too. Only values written from now on are affected, so this is a catalogue
change, not a table rewrite. A server built without LZ4 keeps pglz: the migration
says so and goes on, since nothing depends on the method.
"""

import logging

from django.db import migrations, transaction
from django.db.utils import NotSupportedError, ProgrammingError

COLUMNS = {
    "durableruns_run": ("input", "result", "error"),
    "durableruns_step": ("input", "result", "error"),
    "durableruns_effect": ("args", "result", "error"),
    "durableruns_approval": ("payload",),
    "durableruns_langgraphcheckpoint": ("checkpoint", "metadata"),
    "durableruns_langgraphblob": ("blob",),
    "durableruns_langgraphwrite": ("blob",),
}

logger = logging.getLogger(__name__)


def _set(schema_editor, method):
    """SET COMPRESSION `method` on every payload column (DEFAULT: the server's setting)."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return
    quote = schema_editor.quote_name
    for table, columns in COLUMNS.items():
        changes = ", ".join(f"ALTER COLUMN {quote(c)} SET COMPRESSION {method}" for c in columns)
        try:
            with transaction.atomic(using=connection.alias):
                schema_editor.execute(f"ALTER TABLE {quote(table)} {changes}", params=None)
        except (NotSupportedError, ProgrammingError) as exc:
            logger.warning("payload columns keep their compression (%s): %s", method, exc)
            return


def forward(apps, schema_editor):
    _set(schema_editor, "lz4")


def backward(apps, schema_editor):
    _set(schema_editor, "DEFAULT")


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0010_error_statistics")]
    operations = [migrations.RunPython(forward, backward)]
