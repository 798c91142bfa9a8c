from django.db import migrations


class Migration(migrations.Migration):
    """Joins the areas developed in parallel (approvals, dashboard, replay/API, admin)."""

    dependencies = [
        ("durableruns", "0004_admin"),
        ("durableruns", "0005_merge_dashboard"),
    ]
    operations = []
