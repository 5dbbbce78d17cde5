"""Packaging as users install tools (issue 18): the wheel built from a clone carries the
`walctl` entry point and every man page under share/man/man1, declares every package walctl
imports, and keeps pyspark in the [spark] extra.

(``pipx install .`` installs that same wheel and links share/man/man1 into its man
folder; it was checked by hand, as the README says, not here: it needs pipx and the
network for every dependency.)
"""

from __future__ import annotations

import ast
import email
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(clone, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                           "--wheel-dir", str(out), str(clone)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    (built,) = out.glob("walctl-*.whl")
    return built


def _metadata(whl: Path) -> email.message.Message:
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(name))


def test_the_wheel_installs_every_man_page_under_share_man_man1(wheel, clone):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        pages = sorted(n.rsplit("/", 1)[1] for n in names if "/data/share/man/man1/" in n)
        assert pages == sorted(p.name for p in (clone / "man" / "man1").glob("*.1"))
        assert "walctl-recover.1" in pages and "walctl.1" in pages
        for page in pages:
            (member,) = [n for n in names if n.endswith(f".data/data/share/man/man1/{page}")]
            assert z.read(member) == (clone / "man" / "man1" / page).read_bytes()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "walctl = walctl.cli:main" in entry_points
    assert any(n == "walctl/spark/job.py" for n in names)  # the extra's code ships; only pyspark is optional


def test_installed_wheel_puts_the_man_page_where_man_finds_it(wheel, tmp_path):
    # --ignore-installed: without it pip uninstalls the walctl of the environment running the tests.
    prefix = tmp_path / "prefix"
    ours = Path(sysconfig.get_path("scripts")) / "walctl"
    had_ours = ours.exists()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--ignore-installed",
                           "--disable-pip-version-check", "--prefix", str(prefix), str(wheel)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "uninstall" not in (proc.stdout + proc.stderr).lower()
    assert ours.exists() == had_ours, f"{ours}: the test environment's walctl must stay installed"
    page = prefix / "share" / "man" / "man1" / "walctl-recover.1"
    assert page.is_file()
    assert (prefix / "bin" / "walctl").is_file()
    if shutil.which("man") is None:
        return  # the file is where man looks (checked above); man itself is not installed here
    found = subprocess.run(["man", "-M", str(prefix / "share" / "man"), "-w", "walctl-recover"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert found.returncode == 0 and Path(found.stdout.strip()) == page, found
    # Nothing linked the pages into a folder man searches (Debian's pipx 1.1.0): the installed
    # walctl's --help names the folder to put on MANPATH (walctl.cli.manpages, as installed; the
    # editable walctl of this environment would shadow the package on PYTHONPATH).
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('m', sys.argv[1]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.man_dir())")
    shown = subprocess.run([sys.executable, "-c", code, str(site / "walctl" / "cli" / "manpages.py")],
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert Path(shown) == prefix / "share" / "man"


def _requirements(meta: email.message.Message) -> tuple[set[str], dict[str, set[str]]]:
    plain: set[str] = set()
    extras: dict[str, set[str]] = {}
    for req in meta.get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        name = spec.split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip().lower()
        if "extra ==" in marker:
            extra = marker.split("extra ==")[1].strip().strip("'\"")
            extras.setdefault(extra, set()).add(name)
        else:
            plain.add(name)
    return plain, extras


def test_pyspark_is_an_extra_and_the_test_extra_pulls_it(wheel):
    plain, extras = _requirements(_metadata(wheel))
    assert "pyspark" not in plain
    assert extras["spark"] == {"pyspark"}
    assert "walctl" in extras["test"]  # walctl[spark]: the compaction tests run a real Spark session
    assert "moto" in extras["test"] and not {"cfn-lint", "docker", "sympy"} & extras["test"]


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> files of walctl/ that import it (stdlib and fallbacks for ImportError left out)."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO_ROOT / "walctl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        fallback = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and "ImportError" in ast.unparse(node.type or ast.Name("")):
                fallback |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in fallback:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "walctl" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def test_every_imported_package_is_declared(wheel):
    from importlib.metadata import packages_distributions

    plain, extras = _requirements(_metadata(wheel))
    dists = packages_distributions()
    imports = _third_party_imports()
    assert {"typer", "rich", "crc32c", "boto3", "botocore", "pyspark"} <= set(imports)
    for module, files in imports.items():
        owners = {d.lower() for d in dists.get(module, [module])}
        if owners & extras["spark"]:
            assert all(f.startswith("walctl/spark/") for f in files), f"{module} imported outside walctl/spark: {files}"
        else:
            assert owners & plain, f"{module} (imported by {sorted(files)}) is not a declared dependency"
