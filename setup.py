"""The package list, found rather than listed: every folder with an __init__.py under agent/,
collectors/, checks/ and tui/, installed as db2vtop.<folder> (one namespace, nothing else at the top
of site-packages). A new collector package needs no line here or in pyproject.toml, which holds
everything else (package data included, by glob)."""

from setuptools import find_packages, setup

FOLDERS = ("agent", "collectors", "checks", "tui")

setup(
    package_dir={f"db2vtop.{folder}": folder for folder in FOLDERS},
    packages=[f"db2vtop.{p}" for p in find_packages(include=[p for f in FOLDERS for p in (f, f"{f}.*")])],
)
