"""Packaging: the wheel installs exactly the ``flowgrpo`` namespace, with every subpackage and
data file, and the editable install maps the same module names to the repository's folders.

pyproject.toml lists the packages explicitly (``packages = [...]`` with ``package-dir``
mapping dsl/, operators/, rewards/, trainer/ under ``flowgrpo``): a new subpackage left out of
that list still imports in an editable install but is missing from the wheel. This test builds
the wheel and compares it with the folders on disk.

The wheel is built offline (``pip wheel --no-deps --no-build-isolation``: the setuptools already
installed does the build) from a copy of the project in a temporary folder, so the build's
``build/`` and ``*.egg-info`` never land in the working tree and parallel runs do not collide.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import flowgrpo

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dsl", "operators", "rewards", "trainer")
#: What the build reads: pyproject.toml, the readme it names, and the package folders.
BUILD_INPUTS = ("pyproject.toml", "README.md", "flowgrpo", *PACKAGES)
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Iterator[zipfile.ZipFile]:
    """The wheel built from a copy of the project's build inputs."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, out = tmp / "src", tmp / "dist"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=SKIP)
        else:
            shutil.copy2(path, src / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*command, "--quiet", "-w", str(out), str(src)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}\n{done.stderr}"
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def source_files(suffix: str | None = None) -> list[str]:
    """Files of the four package folders (relative to the repository), without caches."""
    return sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix != ".pyc"
        and (suffix is None or path.suffix == suffix)
    )


def subpackages() -> list[str]:
    """Folders under the four packages that hold an ``__init__.py`` (the packages themselves
    included), relative to the repository."""
    return sorted(
        str(p.parent.relative_to(ROOT))
        for p in ROOT.glob("*/**/__init__.py")
        if p.relative_to(ROOT).parts[0] in PACKAGES and "__pycache__" not in p.parts
    )


@pytest.mark.slow
def test_wheel_holds_only_the_flowgrpo_namespace(wheel):
    top = {name.split("/")[0] for name in wheel.namelist()}
    assert top == {"flowgrpo", f"flowgrpo-{flowgrpo.__version__}.dist-info"}


@pytest.mark.slow
def test_every_subpackage_and_file_is_in_the_wheel(wheel):
    names = set(wheel.namelist())
    missing_packages = [
        f"flowgrpo/{package}"
        for package in subpackages()
        if f"flowgrpo/{package}/__init__.py" not in names
    ]
    assert not missing_packages, (
        f"subpackages missing from the wheel: {missing_packages}; add them to "
        "[tool.setuptools] packages in pyproject.toml"
    )
    # Every file, not only packages: a .py in a folder without __init__.py, or a data file
    # that package-data does not name, would be left out too.
    missing_files = [f for f in source_files() if f"flowgrpo/{f}" not in names]
    assert not missing_files, f"files missing from the wheel: {missing_files}"
    assert "flowgrpo/dsl/workflow.lark" in names
    for core in ("__init__.py", "registry.py", "configuration.py"):
        assert f"flowgrpo/{core}" in names


@pytest.mark.slow
def test_wheel_declares_the_console_script(wheel):
    info = f"flowgrpo-{flowgrpo.__version__}.dist-info/entry_points.txt"
    text = wheel.read(info).decode()
    assert "[console_scripts]" in text
    assert "flowgrpo = flowgrpo.trainer.cli:main" in text


def test_subpackages_finds_the_known_folders():
    found = subpackages()
    for folder in ("dsl", "operators/sandbox", "operators/tasks", "trainer/loop", "trainer/cli"):
        assert folder in found
    assert all(not f.startswith(("tests", "scripts", "research", "flowgrpo")) for f in found)


@pytest.mark.parametrize("folder", subpackages())
def test_the_editable_install_maps_each_package_to_its_folder(folder):
    """``flowgrpo.<a>.<b>`` is the folder ``<a>/<b>`` of this repository, as in the wheel."""
    name = "flowgrpo." + folder.replace("/", ".")
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is not importable"
    assert Path(spec.origin).resolve() == ROOT / folder / "__init__.py"


def test_the_core_modules_come_from_this_repository():
    for name in ("flowgrpo", "flowgrpo.registry", "flowgrpo.configuration"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and Path(spec.origin).resolve().is_relative_to(ROOT / "flowgrpo")
