"""``a3c-ray tune --config FILE``: a hyperparameter search on Ray Tune, each trial one whole run.

The search space is the config's ``tune.space`` (``algo.lr: loguniform(1e-4, 1e-2)``, ...); the
trials write ordinary run directories under ``OUT/runs/`` and Tune's results under ``OUT/search``.
It prints one line per trial, then the best trial's values, run directory and checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from a3c_ray.commands.flags import add_dashboard_flags, add_set_flag, add_track_flag
from a3c_ray.config import METRICS, SCHEDULERS, Config
from a3c_ray.config.space import samplers
from a3c_ray.configs import resolve as resolve_config
from a3c_ray.errors import EXIT_FAILURE, ConfigError, install_hint, one_line
from a3c_ray.rundir.summary import read_summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        required=True,
        help="YAML file (or shipped config name) whose tune.space says what to search",
    )
    p.add_argument("--num-samples", type=int, help="trials to run (default: tune.num_samples)")
    p.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        help="trial scheduler (default: tune.scheduler)",
    )
    p.add_argument(
        "--metric",
        choices=METRICS,
        help="what the search maximizes (default: tune.metric)",
    )
    add_set_flag(p, " for every trial")
    p.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        help="directory for the trials' runs and Tune's results; must not exist "
        "(default: runs/tune-<config>-<time>)",
    )
    p.add_argument(
        "--address", help="Ray cluster to attach to (default: RAY_ADDRESS, else an embedded Ray)"
    )
    add_dashboard_flags(p)
    add_track_flag(p)
    p.add_argument("--json", action="store_true", help="print the trials and the best as JSON")
    p.add_argument("--quiet", action="store_true", help="no Tune progress tables while it runs")


def search_config(args: argparse.Namespace) -> Config:
    cfg = Config.load(resolve_config(args.config))
    problems = cfg.apply_sets(args.set)
    if args.num_samples is not None:
        cfg.tune.num_samples = args.num_samples
    if args.scheduler is not None:
        cfg.tune.scheduler = args.scheduler
    if args.metric is not None:
        cfg.tune.metric = args.metric
    if cfg.run.run_dir is not None:
        problems.append("run.run_dir: a search gives each trial its own; use --out for the search")
    if problems:
        raise ConfigError(problems)
    from a3c_ray.algo import choices
    from a3c_ray.envs.make import env_problems

    cfg.check(choices.problems, env_problems)
    samplers(cfg)  # the space's problems, all at once
    return cfg


def out_dir(args: argparse.Namespace) -> Path:
    out = (
        args.out or Path("runs") / f"tune-{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError([f"--out {out} already exists; a search writes into a new directory"])
    return out


def rows(grid: Any, names: list[str]) -> list[dict[str, Any]]:
    """One row per trial: its id, values, state, last report and run directory."""
    out = []
    for r in grid:
        m = r.metrics or {}
        config = r.config or _params(Path(r.path))  # a trial that failed before reporting has none
        out.append(
            {
                "trial": f"A3C_{m['trial_id']}" if m.get("trial_id") else _trial_name(r.path),
                "values": {n: config.get(n) for n in names},
                "error": None if r.error is None else one_line(r.error),
                "env_steps": m.get("env_steps"),
                "mean_return_100": _num(m.get("mean_return_100")),
                "eval_return": _num(m.get("eval_return")),
                "run_dir": m.get("run_dir"),
                "stopped_because": _summary(m.get("run_dir")).get("stopped_because"),
                "restored_from": m.get("restored_from") or None,
            }
        )
    return out


def _params(trial_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((trial_dir / "params.json").read_text()))
    except (OSError, ValueError):
        return {}


def _trial_name(path: str) -> str:
    """``A3C_<id>`` from Tune's trial folder name ``A3C_<id>_<n>_<values>_<time>``."""
    return "_".join(Path(path).name.split("_")[:3])


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 2)


def _summary(run_dir: str | None) -> dict[str, Any]:
    """The summary.json of a trial's newest run directory; empty where there is none."""
    try:
        return dict(read_summary(run_dir or ""))
    except (OSError, ValueError):
        return {}


def run(args: argparse.Namespace) -> int:
    cfg = search_config(args)
    out = out_dir(args)
    track = None
    if args.track:
        from a3c_ray.runtime.tracking import track_spec

        # Each trial a run of one experiment (W&B: one group), named after the search.
        track = track_spec(args.track, Path(args.config).stem, project=out.name, group=out.name)
    if not (args.address or os.environ.get("RAY_ADDRESS")):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        from a3c_ray.runtime import cluster, search
    except ImportError as e:
        raise ConfigError([f"a3c-ray tune needs Ray Tune ({e}); {install_hint('tune')}"]) from None

    started = cluster.connect(
        cfg,
        args.address,
        args.dashboard_host,
        args.dashboard_port,
        num_cpus=os.cpu_count() or 1,
    )
    try:
        result = search.search(
            cfg, out, verbose=0 if args.quiet or args.json else 1, fixed_size=started, track=track
        )
    finally:
        if started:
            search.shutdown()
    names = list(cfg.tune.space)
    table = rows(result.grid, names)
    metric = cfg.tune.metric
    scored = [r for r in table if r["error"] is None and r[metric] is not None]
    best = max(scored, key=lambda r: r[metric]) if scored else None
    if best is not None:
        best["checkpoint"] = _summary(best["run_dir"]).get("checkpoint")
    failed = [r for r in table if r["error"] is not None]
    if args.json:
        print(json.dumps({"results": result.path, "metric": metric, "trials": table, "best": best}))
    else:
        print(f"\n{len(table)} trials, {len(failed)} failed; results in {result.path}")
        for r in table:
            values = " ".join(f"{n}={_fmt(v)}" for n, v in r["values"].items())
            state = (
                f"FAILED: {r['error']}"
                if r["error"]
                else f"{metric} {r[metric]}  env_steps {r['env_steps']}"
                + ("  (stopped by the search)" if r["stopped_because"] == "interrupted" else "")
            )
            print(f"  {r['trial']}  {values}  {state}")
        if best is not None:
            print(f"best trial: {best['trial']} ({metric} {best[metric]})")
            for n, v in best["values"].items():
                print(f"  --set {n}={_fmt(v)}")
            print(f"  run directory: {best['run_dir']}")
            print(f"  checkpoint: {best['checkpoint']}")
    if best is None:
        print("a3c-ray: no trial finished with a value of the metric", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
