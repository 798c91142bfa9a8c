"""The layering contract (pyproject.toml, [tool.importlinter]) holds, and can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_are_kept():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "durableruns", tmp_path / "durableruns")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    probe = tmp_path / "durableruns" / "engine" / "probe.py"
    probe.write_text("def ring():\n    from ..tasks import advance_run\n\n    return advance_run\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0
    assert "durableruns.engine.probe -> durableruns.tasks" in done.stdout


def test_the_logs_importing_the_engine_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "durableruns", tmp_path / "durableruns")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    logs = tmp_path / "durableruns" / "logs.py"
    logs.write_text(logs.read_text() + "\n\ndef _probe():\n    from .engine import store\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0
    assert "durableruns.logs -> durableruns.engine.store" in done.stdout
