"""db2vtop installed the way users install it: a wheel, `pip install` into a clean venv, offline.

`make test` fills build/wheelhouse with the wheels of every dependency (and setuptools, for
the build), so the wheel is built and installed here from the current sources without a network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from db2vtop.collectors.registry import INPUTS
from tests.conftest import ROOT

WHEELHOUSE = ROOT / "build" / "wheelhouse"
FOLDERS = ("agent", "collectors", "checks", "tui")
OFFLINE = ["--no-index", "--find-links", str(WHEELHOUSE), "--quiet", "--disable-pip-version-check"]
# a peer of its own kind: the wheelhouse `make test-ready` builds, a wheel built and installed into a fresh venv
# (a minute of pip on 2 cores): `make test` runs these, `make check` does not
pytestmark = pytest.mark.peer



@pytest.fixture(autouse=True, scope="module")
def wheelhouse() -> None:
    """Never a skip: make test's wheelhouse missing once hid every test here (they passed as skipped)."""
    assert (WHEELHOUSE / ".complete").is_file(), "build/wheelhouse is missing: make wheelhouse (make test builds it)"


def sources(tmp: Path) -> Path:
    """A copy of the sources as a fresh clone has them: without build/ (setuptools would reuse files an earlier
    build left in build/lib), a venv or caches."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                              ".*_cache", ".hypothesis", "results"))
    return src


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of the current sources, built offline as pip builds it for a user."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = sources(tmp)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp / "dist"), *OFFLINE, str(src)],
                   check=True, timeout=300, cwd=tmp)
    return next((tmp / "dist").glob("db2vtop-*.whl"))


def test_every_package_folder_and_its_data_is_in_the_wheel(wheel: Path):
    """setup.py finds the packages (no list to keep): every folder with an __init__.py is in the wheel
    as db2vtop.<folder>, with each source package's declarations and template beside it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    on_disk = {p.relative_to(ROOT) for top in FOLDERS for p in (ROOT / top).rglob("__init__.py")}
    assert {f"db2vtop/{p}" for p in on_disk} <= names
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"db2vtop"}
    for i in INPUTS:
        folder = "db2vtop/" + i.package.removeprefix("db2vtop.").replace(".", "/")
        assert f"{folder}/template.toml" in names, i.package
        assert i.schema is not None or f"{folder}/schema.toml" in names, i.package


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with db2vtop installed from a wheel of the current sources; its bin/ directory."""
    tmp = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, timeout=120)
    subprocess.run([str(tmp / "venv" / "bin" / "python"), "-m", "pip", "install", *OFFLINE, str(wheel)],
                   check=True, timeout=600, cwd=tmp)
    return tmp / "venv" / "bin"


def outside(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """A program of the installed venv, run away from the repository so nothing of the source tree is importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def db2vtop(bin_dir: Path, cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return outside([str(bin_dir / "db2vtop"), *args], cwd, timeout)


def test_site_packages_holds_one_namespace(installed: Path):
    site = next((installed.parent / "lib").glob("python3*/site-packages"))
    ours = {p.name for p in site.iterdir()} & {*FOLDERS, "db2vtop"}
    assert ours == {"db2vtop"}
    assert {p.name for p in (site / "db2vtop").iterdir() if not p.name.startswith("__")} == set(FOLDERS)


def test_the_install_brings_pyvmomi_for_the_vsphere_session(installed: Path, tmp_path: Path):
    """pyvmomi is a runtime dependency: the vSphere session is its stub, not a copy of it."""
    probe = "from db2vtop.collectors.vsphere import connection; print(connection._Stub.__mro__[1].__module__)"
    done = outside([str(installed / "python"), "-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pyVmomi.SoapAdapter"


def test_the_installed_command_runs_from_its_package_data(installed: Path, tmp_path: Path):
    assert db2vtop(installed, tmp_path, "--version").stdout.startswith("db2vtop ")

    rules = db2vtop(installed, tmp_path, "rules", "--format", "json")
    assert rules.returncode == 0, rules.stderr
    assert len(json.loads(rules.stdout)) > 100

    config = tmp_path / "db2vtop.toml"
    init = db2vtop(installed, tmp_path, "config", "init", "-o", str(config))
    assert init.returncode == 0, init.stderr
    check = db2vtop(installed, tmp_path, "config", "check", "-c", str(config))
    assert check.returncode == 0 and ": OK (" in check.stdout, check.stderr

    store = tmp_path / "metrics.db"  # what an agent recorded, as triage is run on an agent's store
    once = db2vtop(installed, tmp_path, "agent", "--once", "--store", str(store))
    assert once.returncode == 0, once.stderr
    triage = db2vtop(installed, tmp_path, "triage", "--store", str(store), "--format", "json")
    assert triage.returncode in (0, 1, 2), triage.stderr
    assert {"generated_at", "findings", "verdicts"} <= json.loads(triage.stdout).keys()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by make test-deps")
def test_the_installed_tui_replays_a_store(installed: Path, tmp_path: Path, tmux):
    store = tmp_path / "metrics.db"
    once = db2vtop(installed, tmp_path, "agent", "--once", "--store", str(store))
    assert once.returncode == 0, once.stderr
    command = (f"cd {tmp_path} && env -u COLUMNS -u LINES {installed / 'db2vtop'} replay --store {store}; "
               "echo EXITED $?; sleep 30")
    tmux.run("new-session", "-d", "-s", "tui", "-x", "160", "-y", "45", "-e", f"HOME={os.environ['HOME']}", command)
    screen = tmux.wait_for("replay · read-only")
    assert "Traceback" not in screen
    tmux.keys("q")
    tmux.wait_for("EXITED 0")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is what the quick start runs")
def test_make_run_says_what_it_installs_in_one_line(tmp_path: Path):
    """The quick start's first output: `make run` on a fresh clone installs db2vtop into .venv/ and says so in one
    line (setuptools' notice on editable installs, a block of asterisks, read as "something is wrong")."""
    src = sources(tmp_path)
    # a make of its own, not a sub-make of the one running the tests (that one would say "Entering directory")
    inherited = ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    env = {**{k: v for k, v in os.environ.items() if k not in inherited},
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE)}  # offline, from the wheelhouse
    done = subprocess.run(["make", ".venv/.installed-run"], cwd=src, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (done.stdout + done.stderr).splitlines() == ["installing db2vtop and what it needs to run into .venv/ "
                                                        "(once)..."], done.stdout + done.stderr
    assert (src / ".venv" / "bin" / "db2vtop").exists()
