"""What starting an embedded Ray leaves in the calling process (a script, a notebook)."""

from __future__ import annotations

import os

import pytest


@pytest.mark.parametrize("before", [None, "/elsewhere"])
def test_ray_processes_get_the_working_directory_on_pythonpath_and_the_caller_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str], before: str | None
) -> None:
    """Ray's processes, started inside ray.init, see the working directory on PYTHONPATH (an env
    named ``module:Class`` is found there); the process that called gets its PYTHONPATH back."""
    import ray

    from a3c_ray.config import Config
    from a3c_ray.runtime import session

    seen: list[str | None] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(os.environ.get("PYTHONPATH")))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    if before is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", before)
    assert session.connect(Config(), None) is True
    expected = [str(tmp_path)] + ([before] if before else [])
    assert seen == [os.pathsep.join(expected)]
    assert os.environ.get("PYTHONPATH") == before
