from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durableruns", "0022_run_escalation_wait"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("kind__in", ["approval", "child", "sleep"])),
                fields=["run", "position"],
                name="step_run_waits",
            ),
        ),
    ]
