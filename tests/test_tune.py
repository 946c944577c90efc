"""``a3c-ray tune``: the search space's parsing and checks, and searches on Ray Tune whose trials
are whole runs (a 2-sample search that names a best trial, a failed trial that is reported and not
fatal, population-based training that continues a trial from another's checkpoint)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from a3c_ray.commands.cli import main
from a3c_ray.config import Config
from a3c_ray.config.space import Sampler, parse, samplers, space_problems
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout

# Looked up, not imported: importing Tune takes seconds, which the tests without Ray need not wait.
if importlib.util.find_spec("ray.tune") is None:
    pytest.skip("a3c-ray tune needs the tune extra", allow_module_level=True)


# -- the space ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "kind", "args"),
    [
        ("loguniform(1e-4, 1e-2)", "loguniform", (1e-4, 1e-2)),
        ("uniform(0.9, 0.999)", "uniform", (0.9, 0.999)),
        ("quniform(1, 10, 1)", "quniform", (1, 10, 1)),
        ("randint(3, 21)", "randint", (3, 21)),
        ("choice([5, 20])", "choice", ([5, 20],)),
        ("grid(['rmsprop', 'adam'])", "grid", (["rmsprop", "adam"],)),
    ],
)
def test_samplers_parse(expr: str, kind: str, args: tuple[object, ...]) -> None:
    assert parse(expr) == Sampler(kind, args)


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("lognormal(0, 1)", "unknown sampler 'lognormal'"),
        ("loguniform(0, 1e-2)", "loguniform needs low > 0"),
        ("uniform(1, 0.5)", "finite low < high"),
        ("uniform(1)", "uniform takes 2 arguments"),
        ("choice([])", "choice takes a non-empty list"),
        ("randint(1.5, 3)", "randint takes integers"),
        ("uniform(a, b)", "uniform takes literal values"),
        ("__import__('os')", "unknown sampler '__import__'"),
        ("1e-3", "not a sampler expression"),
    ],
)
def test_bad_samplers_say_what_is_wrong(expr: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        parse(expr)


def space_cfg(space: dict[str, str], scheduler: str = "fifo") -> Config:
    cfg = Config()
    cfg.tune.space = space
    cfg.tune.scheduler = scheduler
    return cfg


def test_space_is_checked_against_the_fields_it_sets() -> None:
    problems = space_problems(
        space_cfg(
            {
                "algo.lr": "loguniform(1e-4, 1e-2)",  # good
                "algo.gamma": "uniform(0.9, 1.5)",  # 1.5 is no discount
                "algo.t_max": "choice([5, 'long'])",  # not an integer
                "algo.nope": "choice([1])",
                "run.run_dir": "choice(['a'])",
            }
        )
    )
    assert len(problems) == 4, problems
    assert any(
        p.startswith("tune.space.algo.gamma:") and "must be in [0, 1]" in p for p in problems
    )
    assert any(
        p.startswith("tune.space.algo.t_max:") and "expected an integer" in p for p in problems
    )
    assert any("unknown config field 'algo.nope'" in p for p in problems)
    assert any("run.run_dir cannot be searched" in p for p in problems)
    assert ["empty" in p for p in space_problems(space_cfg({}))] == [True]


def test_pbt_refuses_what_a_checkpoint_cannot_follow() -> None:
    problems = space_problems(
        space_cfg(
            {
                "model.hidden_sizes": "choice([[64], [128]])",
                "algo.lr": "grid([1e-3])",
                "algo.optimizer": "choice(['rmsprop', 'adam'])",
            },
            "pbt",
        )
    )
    assert any("pbt continues trials" in p for p in problems)
    assert any("use choice instead of grid" in p for p in problems)
    # A checkpoint's RMSProp statistics are no Adam's: a trial could not continue another's.
    assert any(p.startswith("tune.space.algo.optimizer: pbt") for p in problems), problems
    assert len(problems) == 3
    assert not space_problems(space_cfg({"algo.optimizer": "choice(['rmsprop', 'adam'])"}))
    with pytest.raises(ConfigError):
        samplers(space_cfg({"algo.lr": "grid([1e-3])"}, "pbt"))


def test_a_continuous_sampler_of_an_integer_field_or_a_grid_without_points_is_refused() -> None:
    problems = space_problems(
        space_cfg(
            {"algo.t_max": "uniform(3, 20)", "algo.entropy_coef": "quniform(0.011, 0.019, 0.01)"}
        )
    )
    assert any(
        p.startswith("tune.space.algo.t_max:") and "expected an integer" in p for p in problems
    )
    assert any("no multiple of q between low and high" in p for p in problems), problems
    assert len(problems) == 2


# Each sampler, a field it may set, and a start at the edge of its range (or of its choices),
# where Ray's perturbation by 0.8 or 1.2 would step out of it.
PBT_CASES = [
    ("algo.gamma", "uniform(0.9, 0.99)", 0.985),
    ("algo.lr", "loguniform(1e-4, 1e-2)", 9.5e-3),
    ("algo.t_max", "quniform(4, 20, 4)", 20),
    ("algo.entropy_coef", "quniform(0.0, 0.02, 0.005)", 0.02),
    ("algo.t_max", "randint(3, 21)", 20),
    ("algo.t_max", "choice([5, 20])", 5),
    ("ps.wire_dtype", "choice(['float32', 'bfloat16', 'float16'])", "float32"),
]


@pytest.mark.parametrize(("field", "expr", "start"), PBT_CASES, ids=[c[1] for c in PBT_CASES])
def test_pbt_explores_each_sampler_inside_its_space(field: str, expr: str, start: object) -> None:
    """Ray Tune's own explore step, as the search's PBT scheduler configures it, 300 times in a
    row from a value at the edge: every value stays in the sampler's range or choices, on its
    grid, an integer where the sampler's are, and the field takes it."""
    import random

    from ray.tune.schedulers.pbt import _explore

    from a3c_ray.runtime.search import scheduler

    cfg = space_cfg({field: expr}, "pbt")
    pbt = scheduler(cfg)
    sampler = parse(expr)
    random.seed(0)
    np.random.seed(0)
    value, seen = start, set()
    for _ in range(300):
        new, _ = _explore(
            {field: value},
            pbt._hyperparam_mutations,
            pbt._resample_probability,
            pbt._perturbation_factors,
            pbt._custom_explore_fn,
        )
        old, value = value, new[field]
        seen.add(value)
        cfg.set(field, value)  # the field takes it
        assert not [q for q in cfg.validate() if q.startswith(field)]
        if sampler.kind == "choice":
            choices = sampler.args[0]
            assert value in choices
        else:
            low, high = sampler.args[0], sampler.args[1]
            assert low <= value <= high, (old, value)
        if sampler.kind == "randint" or all(isinstance(a, int) for a in sampler.args):
            assert type(value) is int, (old, value)
        if sampler.kind == "quniform":
            assert value / sampler.args[2] == pytest.approx(round(value / sampler.args[2]))
    assert len(seen) > 1  # it does explore


def test_trial_config_takes_numpy_values(tmp_path: Path) -> None:
    from a3c_ray.runtime.search import trial_config

    cfg = trial_config(
        Config().to_dict(), {"algo.lr": np.float64(3e-3), "algo.t_max": np.int64(7)}, str(tmp_path)
    )
    assert (cfg.algo.lr, cfg.algo.t_max, cfg.run.run_dir) == (3e-3, 7, str(tmp_path))
    assert type(cfg.algo.t_max) is int


def write_config(path: Path, tune: dict[str, object], **sections: dict[str, object]) -> Path:
    base: dict[str, object] = {
        "env": {"id": "CartPole-v1", "num_envs": 2},
        "run": {
            "workers": 1,
            "worker_cpus": 0.5,
            "ps_cpus": 0.25,
            "monitor_cpus": 0.25,
            "max_steps": 6000,
            "target_return": None,
        },
        "monitor": {"eval_every": 1.0, "eval_episodes": 2},
        "tune": {"report_every": 1.0, **tune},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}  # type: ignore[dict-item]
    path.write_text(yaml.safe_dump(base))
    return path


@pytest.mark.parametrize(
    ("tune", "extra", "says"),
    [
        ({"space": {}}, [], "tune.space: empty"),
        ({"space": {"algo.lr": "loguniform(1e-4)"}}, [], "loguniform takes 2 arguments"),
        ({"space": {"algo.lr": "choice([1e-3])"}}, ["--scheduler", "bogus"], "invalid choice"),
        ({"space": {"algo.lr": "choice([1e-3])"}, "metric": "loss"}, [], "tune.metric"),
        ({"space": {"algo.lr": "choice([1e-3])"}}, ["--set", "run.run_dir=x"], "use --out"),
        (
            {"space": {"algo.optimizer": "choice(['rmsprop', 'adam'])"}, "scheduler": "pbt"},
            [],
            "tune.space.algo.optimizer: pbt",
        ),
    ],
)
def test_bad_search_input_exits_2_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tune: dict[str, object],
    extra: list[str],
    says: str,
) -> None:
    cfg = write_config(tmp_path / "s.yaml", tune)
    code = main(["tune", "--config", str(cfg), "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "out").exists()


def test_an_existing_out_directory_is_never_written_into(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path / "s.yaml", {"space": {"algo.lr": "choice([1e-3])"}})
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["tune", "--config", str(cfg), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# -- searches on Ray ----------------------------------------------------------------------------
def run_search(tmp_path: Path, capsys: pytest.CaptureFixture[str], cfg: Path) -> tuple[int, dict]:
    code = main(["tune", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json"])
    out = capsys.readouterr().out.strip().splitlines()[-1]
    return code, json.loads(out)


@pytest.mark.ray
def test_a_two_sample_search_names_its_best_trial(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from a3c_ray.commands.evaluate import evaluate_checkpoint
    from a3c_ray.runtime.search import load_results

    cfg = write_config(
        tmp_path / "s.yaml",
        {"space": {"algo.lr": "loguniform(1e-3, 1e-2)"}, "num_samples": 2},
        run={"max_steps": 3000},
    )
    code, res = run_search(tmp_path, capsys, cfg)
    assert code == 0
    assert len(res["trials"]) == 2 and all(t["error"] is None for t in res["trials"])
    for t in res["trials"]:
        assert 1e-3 <= t["values"]["algo.lr"] <= 1e-2
        assert t["env_steps"] >= 3000  # each trial trained its whole budget
        summary = json.loads((Path(t["run_dir"]) / layout.SUMMARY).read_text())
        assert summary["stopped_because"] == "max_steps"
        saved = Config.load(Path(t["run_dir"]) / layout.CONFIG)
        assert saved.algo.lr == t["values"]["algo.lr"]  # the run used the trial's value
    best = res["best"]
    assert best["mean_return_100"] == max(t["mean_return_100"] for t in res["trials"])
    assert evaluate_checkpoint(best["checkpoint"], 2, 0, False, None)["episodes"] == 2
    # Tune's own ResultGrid reads the search back.
    grid = load_results(res["results"])
    assert len(grid) == 2 and not grid.errors
    assert grid.get_best_result().config["algo.lr"] == best["values"]["algo.lr"]


@pytest.mark.ray
@pytest.mark.long
def test_a_failed_trial_is_reported_and_the_search_goes_on(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(
        tmp_path / "s.yaml",
        {"space": {"env.kwargs.tolerance": "grid([1.0, -1.0])"}, "num_samples": 1},
        env={"id": "tests.picky_env:Picky", "num_envs": 2},
        run={"max_steps": 3000},
    )
    code, res = run_search(tmp_path, capsys, cfg)
    assert code == 0
    by_value = {t["values"]["env.kwargs.tolerance"]: t for t in res["trials"]}
    assert "tolerance must be > 0" in by_value[-1.0]["error"]
    assert by_value[1.0]["error"] is None and by_value[1.0]["env_steps"] >= 3000
    assert res["best"]["trial"] == by_value[1.0]["trial"]


@pytest.fixture
def seeded_sampling() -> Iterator[None]:
    """Tune draws a search's samples from numpy's global generator and PBT's perturbations from
    Python's: both seeded while the test runs, as they were before it afterwards."""
    import random

    state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(0)  # the first two draws of choice([a, b]) are a, then b
    random.seed(0)
    yield
    np.random.set_state(state)
    random.setstate(py_state)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize(
    ("perturbation_steps", "run"),
    [
        # 15 s of training each, however fast the machine: both trials overlap for most of it,
        # and each passes several decisions (PBT exploits from a trial's second decision on).
        pytest.param(1000, {"max_steps": 10**9, "time_limit": 15.0}, marks=pytest.mark.long),
        pytest.param(3000, {"max_steps": 30000}, marks=pytest.mark.long),
    ],
    ids=["15s", "30k"],
)
def test_pbt_continues_a_poor_trial_from_a_good_ones_checkpoint(
    ray_session: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    seeded_sampling: None,
    perturbation_steps: int,
    run: dict[str, object],
) -> None:
    # lr 1e-4 barely learns in 30k steps, 7e-3 learns: the first trial exploits the second. (The
    # 15 s search decides every 1000 env steps, before either learned much: the poorer of the
    # two at a decision exploits the other.)
    cfg = write_config(
        tmp_path / "s.yaml",
        {
            "space": {"algo.lr": "choice([1e-4, 7e-3])"},
            "num_samples": 2,
            "scheduler": "pbt",
            "perturbation_steps": perturbation_steps,
            "quantile_fraction": 0.5,
            "report_every": 0.5,
        },
        run=run,
    )
    code, res = run_search(tmp_path, capsys, cfg)
    assert code == 0
    # The two trials started with the two step sizes: the run directories of their first
    # segments, those that did not go on from a checkpoint.
    runs = Path(res["trials"][0]["run_dir"]).parent
    firsts = [d for d in runs.iterdir() if not (d / layout.SEGMENT).is_file()]
    started = sorted(Config.load(d / layout.CONFIG).algo.lr for d in firsts)
    assert started == [1e-4, 7e-3], started
    results = Path(res["results"])
    # Tune's log of each exploit: [trial, donor, its iteration, the donor's, old values, new].
    exploits = [json.loads(line) for line in (results / "pbt_global.txt").read_text().splitlines()]
    assert exploits
    segments = [d for d in runs.iterdir() if (d / layout.SEGMENT).is_file()]
    assert segments  # run directories of trials that went on from a checkpoint
    from_other = 0
    for d in segments:
        seg = json.loads((d / layout.SEGMENT).read_text())
        summary = json.loads((d / layout.SUMMARY).read_text())
        # The ParameterServer started from the copy the search put in the run directory ...
        assert (
            Path(summary["resumed_from"])
            == d / layout.CHECKPOINTS / Path(seg["restored_from"]).name
        )
        # ... of a Tune checkpoint, and trained on from its step count.
        assert "/checkpoint_" in seg["restored_from"]
        assert summary["env_steps"] > seg["env_steps"] > 0
        from_other += seg["trial"] not in Path(seg["restored_from"]).parts[-4]
    assert from_other  # at least one took another trial's checkpoint, not its own
    # A trial that was exploited says from where, and trained on with the new learning rate.
    restored = [t for t in res["trials"] if t["restored_from"]]
    assert restored
    for t in restored:
        saved_cfg = Config.load(Path(t["run_dir"]) / layout.CONFIG)
        assert saved_cfg.algo.lr == pytest.approx(t["values"]["algo.lr"])


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize(
    ("grace_steps", "max_steps"),
    [
        pytest.param(1500, 6000, marks=pytest.mark.long),
        pytest.param(3000, 15000, marks=pytest.mark.long),
    ],
    ids=["short", "15k"],
)
def test_asha_stops_poor_trials_early(
    ray_session: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    grace_steps: int,
    max_steps: int,
) -> None:
    cfg = write_config(
        tmp_path / "s.yaml",
        {
            "space": {"algo.lr": "grid([1e-5, 3e-5, 3e-3, 7e-3])"},
            "num_samples": 1,
            "scheduler": "asha",
            "grace_steps": grace_steps,
            "reduction_factor": 2,
        },
        run={"max_steps": max_steps},
    )
    code, res = run_search(tmp_path, capsys, cfg)
    assert code == 0 and len(res["trials"]) == 4
    stopped = [t for t in res["trials"] if t["stopped_because"] == "interrupted"]
    assert stopped, res["trials"]  # ended by the scheduler, with a summary and a checkpoint
    # At least one was cut short. A trial whose first report past a rung comes as late as its
    # last step (a loaded machine reports seldom) is stopped there, at its budget: not a failure.
    steps = [(t["values"], t["stopped_because"], t["env_steps"]) for t in res["trials"]]
    assert any(t["env_steps"] < max_steps for t in stopped), steps
    assert any(t["stopped_because"] == "max_steps" for t in res["trials"]), steps


@pytest.mark.ray
def test_a_trial_larger_than_this_ray_is_refused_before_anything_starts(
    ray_session: None, tmp_path: Path
) -> None:
    import ray

    from a3c_ray.runtime.search import search

    cfg = Config.load(write_config(tmp_path / "s.yaml", {"space": {"algo.lr": "choice([1e-3])"}}))
    cfg.run.workers = int(ray.cluster_resources()["CPU"]) * 2 + 1
    with pytest.raises(ConfigError, match=r"a trial takes .* CPUs"):
        search(cfg, tmp_path / "out", fixed_size=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.ray
def test_a_run_started_in_a_placement_group_keeps_its_actors_in_it(ray_session: None) -> None:
    """Inside a trial's group, the ParameterServer and the Monitor go to its first bundle and the
    Workers to any bundle of it; outside any group, Workers spread over the nodes."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from a3c_ray.runtime.placement import central_placement, group_bundles, worker_placement

    cfg = Config()
    bundles = group_bundles(cfg, 2)
    assert bundles == [
        {},
        {"CPU": 1.0},
        {"CPU": 1.0},
        {"CPU": 1.0},
    ]  # driver, PS + Monitor, Workers

    @ray.remote(num_cpus=0)
    def where(cfg: Config) -> tuple[str, int, str, int]:
        w = worker_placement()["scheduling_strategy"]
        c = central_placement(cfg)["scheduling_strategy"]
        return (
            w.placement_group.id.hex(),
            w.placement_group_bundle_index,
            c.placement_group.id.hex(),
            c.placement_group_bundle_index,
        )

    group = placement_group(bundles[1:])
    ray.get(group.ready(), timeout=60)
    try:
        inside = where.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_capture_child_tasks=True
            )
        ).remote(cfg)
        assert ray.get(inside, timeout=60) == (group.id.hex(), -1, group.id.hex(), 0)
    finally:
        remove_placement_group(group)
    assert worker_placement() == {"scheduling_strategy": "SPREAD"}
