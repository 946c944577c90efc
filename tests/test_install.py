"""The package as a user installs it: its version written once (pyproject.toml) and printed by
`a3c-ray --version`, every shipped file in the package data, and a plain (not editable) install
used from another directory that finds its files and names its own install line for an extra."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    (found,) = re.findall(r'^version = "([^"]+)"', project, flags=re.M)
    return found


def plain_env() -> dict[str, str]:
    """This environment without the variables that steer Python's imports (PYTHONPATH, ...) or
    name another environment: a process in the fresh venv sees its own packages alone."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"
    }


def shipped_files() -> list[str]:
    """Every file of the package that is not Python source, as the repository tracks it."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "a3c_ray"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [str(p.relative_to(ROOT)) for p in (ROOT / "a3c_ray").rglob("*") if p.is_file()]
    return sorted(p for p in out if not p.endswith(".py") and "__pycache__" not in p)


@pytest.mark.slow  # a process of its own
def test_version_is_written_once_and_printed_by_the_command(tmp_path: Path) -> None:
    written = pyproject_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", written)
    hits = [
        p
        for p in ROOT.glob("a3c_ray/**/*.py")
        if re.search(rf"""['"]{re.escape(written)}['"]""", p.read_text())
    ]
    assert hits == [], "the version is written in pyproject.toml alone"
    # From another directory, so that only the installed package's metadata is read.
    out = subprocess.run(
        [sys.executable, "-m", "a3c_ray", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"a3c-ray {written}", "reinstall: pip install -e . --no-deps"
    import a3c_ray

    assert a3c_ray.__version__ == written


def test_the_package_data_holds_every_shipped_file() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    globs = re.findall(r'"([^"]+)"', re.search(r"^a3c_ray = \[(.*)\]", block, re.M).group(1))  # type: ignore[union-attr]
    files = shipped_files()
    assert "a3c_ray/configs/pong.yaml" in files and "a3c_ray/py.typed" in files
    missing = [f for f in files if not any(fnmatch.fnmatch(f, f"a3c_ray/{g}") for g in globs)]
    assert missing == [], f"add them to [tool.setuptools.package-data]: {missing}"


@pytest.mark.slow
def test_a_plain_install_used_from_elsewhere_finds_its_files_and_its_install_line(
    tmp_path: Path,
) -> None:
    """`pip install DIR` (not editable) into a fresh environment, whose other packages come from
    this one's (no download); then used from a directory that holds no a3c-ray."""
    src = tmp_path / "src"
    for name in ["pyproject.toml", "README.md", "LICENSE", *shipped_files()]:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, src / name)
    for path in (ROOT / "a3c_ray").rglob("*.py"):
        (src / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, src / path.relative_to(ROOT))
    venv = tmp_path / "venv"
    env = plain_env()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    install = subprocess.run(
        [*pip, "--no-build-isolation", str(src)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = """
import json, a3c_ray
from pathlib import Path
from a3c_ray import configs
from a3c_ray.config import Config
from a3c_ray.errors import install_hint
loaded = {n: Config.load(configs.resolve(n)).env.id for n in configs.names()}
print(json.dumps({"file": a3c_ray.__file__, "version": a3c_ray.__version__,
                  "configs": loaded, "hint": install_hint("video")}))
"""
    out = subprocess.run(
        [str(python), "-c", probe],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    got = json.loads(out.stdout)
    assert Path(got["file"]).is_relative_to(venv), f"the installed copy, not {got['file']}"
    assert got["version"] == pyproject_version()
    shipped = {Path(f).stem for f in shipped_files() if f.startswith("a3c_ray/configs/")}
    assert set(got["configs"]) == shipped and got["configs"]["pong"] == "PongNoFrameskip-v4"
    assert got["hint"].startswith(f"install the 'video' extra: pip install '{src}[video]'")
    version = subprocess.run(
        [str(venv / "bin" / "a3c-ray"), "--version"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert version.stdout.strip() == f"a3c-ray {pyproject_version()}", version.stderr


@pytest.mark.parametrize(
    "checkout, direct_url, expected",
    [
        # run from a checkout, or installed from it with -e
        (Path("/src/a3c-ray"), {}, "-e '/src/a3c-ray[video]'"),
        # pip install 'a3c-ray @ git+https://...@main'
        (
            None,
            {
                "url": "https://example.org/a3c-ray.git",
                "vcs_info": {"vcs": "git", "commit_id": "0123abc", "requested_revision": "main"},
            },
            "'a3c-ray[video] @ git+https://example.org/a3c-ray.git@main'",
        ),
        (
            None,
            {
                "url": "https://example.org/a3c-ray.git",
                "vcs_info": {"vcs": "git", "commit_id": "0123abc"},
            },
            "'a3c-ray[video] @ git+https://example.org/a3c-ray.git@0123abc'",
        ),
        # pip install /some/dir (not editable), and a wheel or sdist
        (None, {"url": "file:///opt/a3c%20ray", "dir_info": {}}, "'/opt/a3c ray[video]'"),
        (
            None,
            {"url": "file:///w/a3c_ray-0.2.0-py3-none-any.whl", "archive_info": {}},
            "'a3c-ray[video] @ file:///w/a3c_ray-0.2.0-py3-none-any.whl'",
        ),
        (None, {}, "'a3c-ray[video]' from where a3c-ray came (its checkout or git URL)"),
    ],
)
def test_a_missing_extra_names_the_pip_line_of_the_way_a3c_ray_was_installed(
    checkout: Path | None, direct_url: dict[str, object], expected: str
) -> None:
    from a3c_ray.errors import pip_target

    assert pip_target("video", checkout, direct_url) == expected
