"""Two partial indexes for the inbox at 10,000 pending approvals (issue 27).

- approval_pending_id (id, including run_id, of pending approvals): the newest pending
  approval, those newer than a page's (the live poll) and the pending count, read
  without visiting the table;
- approval_decided (decided_at desc, id desc, of decided approvals): the history,
  newest decision first, and the poll's "newest decision" probe.

Measured on 100,000 runs, 10,000 pending and 100,000 decided approvals (EXPLAIN
ANALYZE): the poll's newer-than query 120 ms (a scan of every approval by id) to
0.03 ms, the history's first page 299 ms (a sort of every decided approval) to 0.13 ms.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durableruns", "0018_step_fan_out"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(
                condition=models.Q(("state", "pending")),
                fields=["id"],
                include=("run",),
                name="approval_pending_id",
            ),
        ),
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(
                condition=models.Q(("state", "pending"), _negated=True),
                fields=["-decided_at", "-id"],
                name="approval_decided",
            ),
        ),
    ]
