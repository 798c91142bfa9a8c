"""The wheel is the product: installed from it, away from any checkout, the dashboard
renders and its static files are found, and agents of a package installed beside it
load from DURABLERUNS_AGENT_MODULES. That is what an image built FROM ours does; there
is no Docker engine here, so the README's Dockerfile itself is parsed and checked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

from .environ import deployment_environ

# Runs in the installed venv, cwd outside the checkout; prints what the tests assert on.
PROBE = """
import json, re, django
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse
django.setup()
import durableruns
from durableruns.engine import registry
page = Client().get(reverse("login"))
linked = re.findall(r'(?:src|href)="/static/([^"?#]+)', page.content.decode())
print(json.dumps({
    "package": durableruns.__file__,
    "status": page.status_code,
    "page": page.content.decode(),
    "static": {path: finders.find(path) for path in linked},
    "template_dirs": [str(d) for d in settings.TEMPLATES[0]["DIRS"]],
    "agents": sorted(a.name for a in registry.agents()),
}))
"""

MY_AGENTS = """
import durableruns as dr


@dr.agent("shipped-bot")
def shipped_bot(run, task):
    return task
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    # --no-build-isolation: the backend comes from the test venv, so nothing is downloaded.
    pip_wheel = ["pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", *pip_wheel, "--wheel-dir", str(dist), str(ROOT)],
        check=True,
        timeout=120,
    )
    (built,) = dist.glob("durableruns-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel and a `my_agents` package in it; returns its python."""
    home = tmp_path_factory.mktemp("installed")
    venv.create(home / "venv", with_pip=False)
    python = home / "venv" / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel)],
        check=True,
        timeout=120,
    )
    site = Path(_run(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])", home))
    # Dependencies come from this test venv, after the venv's own site-packages: a plain
    # path entry, so the test venv's editable install of a checkout is not activated.
    shared = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_dependencies.pth").write_text("\n".join(sorted(shared)) + "\n")
    (site / "my_agents").mkdir()
    (site / "my_agents" / "__init__.py").write_text("")
    (site / "my_agents" / "agents.py").write_text(MY_AGENTS)
    return python


def _run(python: Path, code: str, cwd: Path, **env: str) -> str:
    environ = {k: v for k, v in deployment_environ().items() if not _is_checkout_setting(k)}
    result = subprocess.run(
        [str(python), "-c", code],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _is_checkout_setting(name: str) -> bool:
    return name in {"PYTHONPATH", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} or (
        name.startswith("DURABLERUNS_")
    )


def _probe(python: Path, **env: str) -> dict:
    outside = python.parent.parent.parent  # the temp dir holding the venv, not the checkout
    out = _run(
        python,
        PROBE,
        outside,
        DJANGO_SETTINGS_MODULE="durableruns.settings",
        DURABLERUNS_VAR_DIR=str(outside / "var"),
        **env,
    )
    return json.loads(out)


def test_the_built_wheel_holds_every_template_and_static_file(wheel):
    expected = {
        f"durableruns/{path.relative_to(ROOT)}"
        for top in ("templates", "static")
        for path in (ROOT / top).rglob("*")
        if path.is_file()
    }
    assert expected  # the layout this test relies on is there
    names = set(zipfile.ZipFile(wheel).namelist())
    assert expected <= names, sorted(expected - names)
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "var/"))]


def test_an_installed_wheel_serves_the_login_page_outside_any_checkout(installed):
    found = _probe(installed)

    venv_dir = installed.parent.parent
    assert Path(found["package"]).is_relative_to(venv_dir)  # the wheel's copy, not a checkout's
    assert found["status"] == 200
    assert "<h1>Log in</h1>" in found["page"]
    assert found["template_dirs"] == []  # found as the installed app's own templates
    # Every file the page links (our CSS, django-htmx's script) is found, ours in the wheel.
    assert {"durableruns/app.css"} < set(found["static"])
    assert any(path.startswith("django_htmx/") for path in found["static"])
    assert all(found["static"].values()), found["static"]
    assert Path(found["static"]["durableruns/app.css"]).is_relative_to(venv_dir)


def test_agents_of_a_package_installed_beside_it_load_from_the_setting(installed):
    assert "shipped-bot" not in _probe(installed)["agents"]  # the default: demo agents only

    found = _probe(installed, DURABLERUNS_AGENT_MODULES="my_agents.agents")

    assert found["agents"] == ["shipped-bot"]


def _readme_dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Shipping your own agents", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```dockerfile\n(.*?)```", section, flags=re.DOTALL)
    lines = [line for line in textwrap.dedent(block).splitlines() if line.strip()]
    return [tuple(line.split(maxsplit=1)) for line in lines]


def test_the_readme_dockerfile_extends_the_compose_image_and_sets_the_agent_modules():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    image = compose["x-app"]["image"]

    (frm, base), (run, install), (env, assignment) = _readme_dockerfile()

    assert (frm, base) == ("FROM", image)
    assert run == "RUN" and install.startswith("pip install ")
    assert env == "ENV"
    name, value = assignment.split("=", 1)
    assert name == "DURABLERUNS_AGENT_MODULES"
    assert f'_env_list("{name}"' in (ROOT / "durableruns/settings.py").read_text()
    assert value == "my_agents.agents"  # the module the installed-wheel test loads


def test_compose_leaves_the_agent_modules_to_the_image():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("migrate", "web", "worker", "beat"):
        assert "DURABLERUNS_AGENT_MODULES" not in compose["services"][name]["environment"]


def test_the_dockerfile_installs_the_product_from_its_wheel():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip wheel" in dockerfile
    assert "PYTHONPATH" not in dockerfile  # code runs from the installed package
    # The app user owns the venv, so a derived image's `RUN pip install` (as that user) works.
    assert "chown durableruns:durableruns /opt/durableruns" in dockerfile
    assert dockerfile.index("USER durableruns") < dockerfile.index("python -m venv")
