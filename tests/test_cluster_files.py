"""The files of cluster/ are valid for the tools that read them, and agree with each other.

No Ray cluster here: the launcher YAML against Ray's own schema, the KubeRay manifest's required
fields, the runtime envs and ignore files through Ray's own packaging code, local.sh's syntax.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray.autoscaler
import yaml

from a3c_ray.commands.submit import DEFAULT_EXCLUDES

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
RUNTIME_ENVS = ("runtime_env.yaml", "runtime_env.preinstalled.yaml")


def load(name: str) -> Any:
    return yaml.safe_load((CLUSTER / name).read_text())


def ray_schema() -> dict[str, Any]:
    path = Path(ray.autoscaler.__file__).parent / "ray-schema.json"
    return dict(json.loads(path.read_text()))


# -- the AWS cluster launcher config ------------------------------------------------------------


def test_aws_launcher_config_validates_against_rays_schema() -> None:
    jsonschema.validate(load("aws.yaml"), ray_schema())


def test_aws_launcher_config_passes_rays_own_checks_after_defaults_are_filled() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(load("aws.yaml")))


def test_schema_check_rejects_a_broken_launcher_config() -> None:
    """The schema is strict enough to catch mistakes: fractional resources, unknown keys."""
    schema = ray_schema()
    fractional = load("aws.yaml")
    fractional["available_node_types"]["cpu_worker"]["resources"] = {"CPU": 0.5}
    unknown = load("aws.yaml")
    unknown["available_node_types"]["head"]["instance_type"] = "m5.xlarge"
    for bad in (fractional, unknown):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_aws_config_has_a_dashboard_head_cpu_workers_and_token_auth() -> None:
    cfg = load("aws.yaml")
    assert cfg["provider"]["type"] == "aws" and cfg["provider"]["region"]
    types = cfg["available_node_types"]
    head, workers = types[cfg["head_node_type"]], [t for t in types if t != cfg["head_node_type"]]
    assert workers and all(types[w]["max_workers"] >= types[w]["min_workers"] >= 0 for w in workers)
    for node_type in types.values():
        assert node_type["node_config"]["InstanceType"]
        assert "REPLACE" in node_type["node_config"]["ImageId"]  # a placeholder, clearly marked
    assert "InstanceType" in head["node_config"]
    head_start = " ".join(cfg["head_start_ray_commands"])
    worker_start = " ".join(cfg["worker_start_ray_commands"])
    assert "--head" in head_start and "--dashboard-host=127.0.0.1" in head_start
    for start in (head_start, worker_start):
        assert "RAY_AUTH_MODE=token ray start" in start and "--metrics-export-port" in start
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert any("pip install" in c and "a3c-ray" in c for c in cfg["setup_commands"])


# -- the KubeRay RayJob -------------------------------------------------------------------------


def test_rayjob_manifest_has_the_fields_kuberay_requires() -> None:
    job = load("rayjob.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert job["metadata"]["name"]
    spec = job["spec"]
    assert spec["entrypoint"].startswith("python -m a3c_ray train ")
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    cluster = spec["rayClusterSpec"]
    assert cluster["authOptions"]["mode"] == "token"
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    assert len(groups) >= 2
    for group in groups:
        assert isinstance(group["rayStartParams"], dict)
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())
        containers = group["template"]["spec"]["containers"]
        assert containers
        for c in containers:
            assert c["name"] and c["image"].startswith("rayproject/ray:2.60.0-py311")
            assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    for worker in cluster["workerGroupSpecs"]:
        assert worker["groupName"]
        assert worker["minReplicas"] <= worker["replicas"] <= worker["maxReplicas"]


def test_rayjob_entrypoint_parses_as_a3c_ray_train() -> None:
    from a3c_ray.commands.submit import build_entrypoint

    entrypoint = " ".join(load("rayjob.yaml")["spec"]["entrypoint"].split())
    args = entrypoint.split()[4:]
    assert build_entrypoint(args) == entrypoint


def test_rayjob_runtime_env_is_yaml_with_the_same_pip_list_as_runtime_env_yaml() -> None:
    from ray.runtime_env import RuntimeEnv

    env = yaml.safe_load(load("rayjob.yaml")["spec"]["runtimeEnvYAML"])
    RuntimeEnv(**env)
    assert env["working_dir"].endswith(".zip") and "://" in env["working_dir"]
    assert env["pip"] == load("runtime_env.yaml")["pip"]
    assert env["env_vars"] == load("runtime_env.yaml")["env_vars"]


# -- runtime envs and what a working-directory upload leaves out -------------------------------


@pytest.mark.parametrize("name", RUNTIME_ENVS)
def test_runtime_envs_are_valid_for_ray(name: str) -> None:
    from ray.runtime_env import RuntimeEnv

    env = load(name)
    RuntimeEnv(**env)
    assert env["env_vars"]["OMP_NUM_THREADS"] == "1"
    assert int(env["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]) >= 30
    assert "working_dir" not in env  # given by --working-dir, so one file serves every project dir


def test_runtime_env_pip_list_matches_the_project_dependencies() -> None:
    """pip gets every runtime dependency of pyproject.toml except ray, which the cluster has, and
    the s3 extra: a run directory on S3 is what lets a run outlive its cluster."""
    import re

    # The [project] dependencies array (tomllib only arrives with Python 3.11).
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    deps = re.findall(r'^\s*"([^"]+)"', block, flags=re.M)
    assert any(d.startswith("torch") for d in deps)
    s3 = re.findall(r'"([^"]+)"', re.search(r"^s3 = \[(.*)\]", text, flags=re.M).group(1))  # type: ignore[union-attr]
    expected = sorted(d.replace(" ", "") for d in [*deps, *s3] if not d.startswith("ray"))
    pip = load("runtime_env.yaml")["pip"]
    assert sorted(pip["packages"]) == expected
    assert "https://download.pytorch.org/whl/cpu" in pip["pip_install_options"]
    assert "pip" not in load("runtime_env.preinstalled.yaml")


@pytest.mark.parametrize("name", RUNTIME_ENVS)
def test_runtime_env_excludes_and_rayignore_cover_the_default_excludes(name: str) -> None:
    rayignore = [
        line.strip()
        for line in (ROOT / ".rayignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert set(DEFAULT_EXCLUDES) <= set(load(name)["excludes"])
    assert set(DEFAULT_EXCLUDES) <= set(rayignore)


def fake_project(root: Path) -> None:
    """A project directory with the things an upload must leave out."""
    for rel in (
        "a3c_ray/__init__.py",
        "a3c_ray/configs/cartpole.yaml",
        "cluster/runtime_env.yaml",
        "pyproject.toml",
        ".venv/lib/python3.11/site-packages/torch/__init__.py",
        ".git/HEAD",
        "runs/cp/checkpoints/ckpt-100.pt",
        "runs/cp/summary.json",
        "runs/cp/tb/events.out.tfevents.123.host",
        "a3c_ray/__pycache__/worker.cpython-311.pyc",
        "a3c_ray.egg-info/PKG-INFO",
        "old-policy.pt",
        "videos/episode-0.mp4",
        "tb/events.out.tfevents.1.host",
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")


def packaged(root: Path, excludes: list[str], tmp: Path) -> set[str]:
    """The files Ray's own packaging puts in the working-directory zip (.gitignore not read)."""
    from ray._private.runtime_env.packaging import create_package

    tmp.mkdir(parents=True, exist_ok=True)
    target = tmp / "pkg.zip"
    create_package(str(root), target, include_gitignore=False, excludes=excludes)
    with zipfile.ZipFile(target) as z:
        return {n for n in z.namelist() if not n.endswith("/")}


KEPT = {"a3c_ray/__init__.py", "a3c_ray/configs/cartpole.yaml", "pyproject.toml"}


@pytest.mark.parametrize("name", RUNTIME_ENVS)
def test_runtime_env_excludes_keep_runs_venv_git_and_big_outputs_out_of_the_upload(
    tmp_path: Path, name: str
) -> None:
    root = tmp_path / "project"
    fake_project(root)
    files = packaged(root, list(load(name)["excludes"]), tmp_path)
    assert files == {*KEPT, "cluster/runtime_env.yaml"}


def test_rayignore_alone_keeps_the_same_things_out_of_the_upload(tmp_path: Path) -> None:
    root = tmp_path / "project"
    fake_project(root)
    shutil.copy(ROOT / ".rayignore", root / ".rayignore")
    files = packaged(root, [], tmp_path)
    assert files == {*KEPT, "cluster/runtime_env.yaml", ".rayignore"}
    # ... and without the ignore file everything would have gone.
    (root / ".rayignore").unlink()
    assert len(packaged(root, [], tmp_path / "again")) > len(files)


# -- local.sh -----------------------------------------------------------------------------------


def test_local_sh_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(CLUSTER / "local.sh")], check=True)


def test_local_sh_usage_and_bad_commands_exit_without_starting_anything(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "A3C_LOCAL_DIR": str(tmp_path / "s")}
    script = str(CLUSTER / "local.sh")
    usage = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, env=env)
    assert usage.returncode == 0
    for command in ("up [N]", "status", "down", "kill", "remove-node I", "add-node I"):
        assert command in usage.stdout
    wrong = subprocess.run(["bash", script, "sideways"], capture_output=True, text=True, env=env)
    assert wrong.returncode == 2
    bad_n = subprocess.run(["bash", script, "up", "two"], capture_output=True, text=True, env=env)
    assert bad_n.returncode == 1 and "number of worker nodes" in bad_n.stderr
    down = subprocess.run(["bash", script, "down"], capture_output=True, text=True, env=env)
    assert down.returncode == 0 and "nothing to stop" in down.stdout
    status = subprocess.run(["bash", script, "status"], capture_output=True, text=True, env=env)
    assert status.returncode == 1 and "up 2" in status.stderr
    kill = subprocess.run(["bash", script, "kill"], capture_output=True, text=True, env=env)
    assert kill.returncode == 0 and "nothing to kill" in kill.stdout
    for index in ("0", "x", ""):
        node = subprocess.run(
            ["bash", script, "remove-node", index], capture_output=True, text=True, env=env
        )
        assert node.returncode == 1 and "worker node index" in node.stderr
    node = subprocess.run(
        ["bash", script, "add-node", "1"], capture_output=True, text=True, env=env
    )
    assert node.returncode == 1 and "no local cluster" in node.stderr
    assert not (tmp_path / "s").exists()


def test_local_sh_refuses_a_state_dir_too_long_for_rays_socket_paths(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY": "/bin/true",
        "A3C_LOCAL_DIR": str(tmp_path / ("x" * 40)),
    }
    r = subprocess.run(
        ["bash", str(CLUSTER / "local.sh"), "up", "1"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 1 and "too long" in r.stderr


def test_manifests_are_plain_yaml_documents() -> None:
    """One document per file, so `kubectl apply -f` and `ray up` read what the tests read."""
    for name in ("aws.yaml", "rayjob.yaml", *RUNTIME_ENVS):
        docs = list(yaml.safe_load_all((CLUSTER / name).read_text()))
        assert len(docs) == 1 and isinstance(docs[0], dict), name
        assert copy.deepcopy(docs[0]) == load(name)


# -- docs/cluster.md says what the files do -----------------------------------------------------


def doc_commands() -> list[str]:
    """The shell commands in docs/cluster.md's code blocks, continuation lines joined."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    blocks = text.split("```")[1::2]
    joined = "\n".join(b.replace("\\\n", " ") for b in blocks)
    return [" ".join(line.split("#")[0].split()) for line in joined.splitlines() if line.strip()]


def test_cluster_doc_commands_use_real_files_flags_and_train_arguments() -> None:
    import argparse
    import shlex

    from a3c_ray.commands.submit import add_arguments, build_entrypoint

    commands = doc_commands()
    submits = [c for c in commands if c.startswith("a3c-ray submit")]
    trains = [c for c in commands if "python -m a3c_ray train" in c]
    assert submits and trains
    for command in submits:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(shlex.split(command)[2:])  # exits on an unknown flag
        build_entrypoint(args.train_args)
        assert args.runtime_env is None or (ROOT / args.runtime_env).is_file()
    for command in trains:
        build_entrypoint(shlex.split(command.split("python -m a3c_ray train", 1)[1]))
    for command in commands:
        for word in shlex.split(command):
            if word.startswith(("cluster/", ".rayignore")):
                assert (ROOT / word).exists(), word
        if command.startswith("cluster/local.sh"):
            assert command.split()[1] in ("up", "status", "down", "kill", "remove-node", "add-node")


def test_cluster_doc_lists_every_local_sh_setting() -> None:
    import re

    doc = set(re.findall(r"`(A3C_[A-Z_]+)`", (ROOT / "docs" / "cluster.md").read_text()))
    script = set(re.findall(r"\$\{(A3C_[A-Z_]+):-", (CLUSTER / "local.sh").read_text()))
    assert script and doc == script


def test_the_declared_gymnasium_has_the_vector_api_the_envs_use() -> None:
    """gymnasium.vector.AutoresetMode (and autoreset_mode=) arrived in gymnasium 1.1: a lower
    bound of 1.0 lets pip keep a gymnasium on which every import of the envs fails."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    (spec,) = re.findall(r'^\s*"gymnasium>=([0-9.]+)', block, flags=re.M)
    assert tuple(int(x) for x in spec.split(".")) >= (1, 1)
    assert "AutoresetMode" in (ROOT / "a3c_ray" / "envs" / "make.py").read_text()
