"""Token and cost totals and budgets on runs (engine/llm.py Spend)."""

from decimal import Decimal

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0013_langgraph_write_path")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="tokens_cached",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="cost",
            field=models.DecimalField(
                db_default=Decimal("0"), decimal_places=10, default=0, max_digits=18
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="max_tokens",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="max_cost",
            field=models.DecimalField(blank=True, decimal_places=10, max_digits=18, null=True),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["-cost", "id"], name="run_cost"),
        ),
    ]
