"""Steps that are branches of a fan-out (run.parallel, run.map, call_tools) name it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durableruns", "0017_run_handed_back_seconds")]

    operations = [
        migrations.AddField(
            model_name="step",
            name="fan_out",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
