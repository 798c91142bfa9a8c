"""What the README promises a newcomer is in the checkout."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_every_file_the_readme_links_to_is_in_the_checkout():
    targets = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", README)
    assert "docs/ARCHITECTURE.md" in targets
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert not missing, missing


def test_the_readme_names_the_architecture_notes_only_where_they_are():
    assert "beside the project" not in README
    for line in README.splitlines():
        if "ARCHITECTURE.md" in line:
            assert "](docs/ARCHITECTURE.md)" in line, line


def test_make_demo_takes_a_port():
    dry_run = subprocess.run(
        ["make", "-n", "demo", "PORT=8001"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "manage.py demo --port 8001" in dry_run.stdout
    assert "make demo PORT=8001" in README
