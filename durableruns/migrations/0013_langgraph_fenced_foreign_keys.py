"""Checkpoints and blobs keep their thread link in Django, without the database's
foreign key check: they are inserted under the fence, a lock on their Run, which a
thread's deletion takes too (models.py, above LangGraphCheckpoint). Only the two
constraints are dropped; nothing is rewritten or validated."""

import django.db.models.deletion
from django.db import migrations, models


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
    ]
