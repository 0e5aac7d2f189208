"""The runtime install works without the dev extras, as the Dockerfile builds it.

Covers: ``pip install`` of exactly what the Dockerfile copies (pyproject.toml,
README.md, crs_controller/) into an empty virtualenv, without ``[dev]``, gives a
``crs-controller`` that runs ``--help`` and ``render -f config/samples`` (table and
JSON) from that venv alone, with no test or lint tool installed, and ships the fleet
page's assets (package data). Needs no control plane; pip uses its configured index,
find-links and cache. About 20-30 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"
# What the sample ClusterResourceSet applies: its two sources and their objects.
SAMPLE_NAMES = ("demo-addon", "demo-secret", "demo-settings", "demo-agent", "demo-from-secret")
DEV_ONLY = ("pytest", "hypothesis", "mypy", "ruff", "importlinter")
TIMEOUT = 100.0


def _env() -> dict[str, str]:
    """This environment, minus whatever would let the repo's own venv leak in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
    }
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty venv with the package installed the Dockerfile's way: ``pip install .``
    from a copy holding only what the Dockerfile copies."""
    root = tmp_path_factory.mktemp("runtime-install")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "crs_controller",
        source / "crs_controller",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    _run(sys.executable, "-m", "venv", root / "venv", cwd=root)
    _run(root / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet", ".", cwd=source)
    return root / "venv"


def test_the_package_comes_from_the_venv_without_dev_tools(venv: Path) -> None:
    probe = (
        "import importlib.util, json, crs_controller;"
        f"print(json.dumps([crs_controller.__file__,"
        f" [m for m in {DEV_ONLY!r} if importlib.util.find_spec(m)]]))"
    )
    location, dev_tools = json.loads(_run(venv / "bin" / "python", "-c", probe, cwd=venv).stdout)
    assert Path(location).is_relative_to(venv)
    assert dev_tools == []


def test_help_runs(venv: Path) -> None:
    result = _run(venv / "bin" / "crs-controller", "--help", cwd=venv)
    assert "usage: crs-controller" in result.stdout
    for command in ("run", "render"):
        assert command in result.stdout


def test_render_shows_the_samples_objects(venv: Path) -> None:
    table = _run(venv / "bin" / "crs-controller", "render", "-f", SAMPLES, cwd=venv).stdout
    for name in ("default/demo", *SAMPLE_NAMES):
        assert name in table
    as_json = _run(
        venv / "bin" / "crs-controller", "render", "-f", SAMPLES, "-o", "json", cwd=venv
    ).stdout
    rendered = json.dumps(json.loads(as_json))
    for name in SAMPLE_NAMES:
        assert f'"{name}"' in rendered


def test_the_fleet_page_ships_in_the_package(venv: Path) -> None:
    """The dashboard's page, script and style are package data: the installed copy
    serves them with nothing fetched from elsewhere."""
    probe = (
        "from crs_controller.app.dashboard.server import ASSETS, asset;"
        "print(*(len(asset(name)) for name, _ in ASSETS.values()))"
    )
    sizes = _run(venv / "bin" / "python", "-c", probe, cwd=venv).stdout.split()
    assert len(sizes) == 3
    assert all(int(size) > 0 for size in sizes)
