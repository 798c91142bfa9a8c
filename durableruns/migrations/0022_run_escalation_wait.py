from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durableruns", "0021_saved_views"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="escalated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="escalated_seconds",
            field=models.FloatField(db_default=0.0, default=0.0),
        ),
    ]
