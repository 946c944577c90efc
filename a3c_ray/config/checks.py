"""The checks of a config's values that need no other layer: each field's range, and the tune
section's settings. ``Config.validate`` gathers them with the checks of the layers above."""

from __future__ import annotations

import math
from typing import Protocol

from a3c_ray.config import sections as s


class Config(Protocol):
    """What the checks read: the sections of ``fields.Config`` (which calls them)."""

    env: s.EnvConfig
    model: s.ModelConfig
    algo: s.AlgoConfig
    run: s.RunConfig
    monitor: s.MonitorConfig
    ps: s.PSConfig
    tune: s.TuneConfig


LOG_STD_BOUNDS = (-5.0, 2.0)
"""The Gaussian policy's log standard deviation is held within these (std 0.0067 to 7.4 in the
units of its samples): below, the log-probability of a sample off the mean grows without bound
(-5.7e19 at -30), and the policy gradient with it."""

TARGET_SOURCES = ("train", "eval")
"""``run.target_from``: the training episodes' mean of the last 100, or the Monitor's evaluations."""
MAX_GRAPH_WORKERS = 32  # the most ps.graph_workers: each shard's threads for compiled graphs
METRICS = ("mean_return_100", "eval_return")
SCHEDULERS = ("fifo", "asha", "pbt")


def range_problems(cfg: Config) -> list[str]:
    """Each value outside its field's range or set, one line naming the field."""
    p: list[str] = []
    e, m, a, r, mon = cfg.env, cfg.model, cfg.algo, cfg.run, cfg.monitor

    def need(cond: bool, msg: str) -> None:
        if not cond:
            p.append(msg)

    need(e.num_envs >= 1, f"env.num_envs: must be >= 1, got {e.num_envs}")
    need(
        e.decorrelate_steps is None or e.decorrelate_steps >= 0,
        f"env.decorrelate_steps: must be >= 0 or null, got {e.decorrelate_steps}",
    )
    need(
        e.max_episode_steps is None or e.max_episode_steps >= 1,
        f"env.max_episode_steps: must be >= 1 or null, got {e.max_episode_steps}",
    )
    need(
        e.frame_stack is None or e.frame_stack >= 1,
        f"env.frame_stack: must be >= 1 or null, got {e.frame_stack}",
    )
    need(
        8 <= e.screen_size <= 210,
        f"env.screen_size: must be between 8 and 210 pixels, got {e.screen_size}",
    )
    need(
        e.repeat_action_probability is None or 0.0 <= e.repeat_action_probability <= 1.0,
        f"env.repeat_action_probability: must be in [0, 1] or null, got {e.repeat_action_probability}",
    )
    need(
        len(m.hidden_sizes) >= 1 and all(h >= 1 for h in m.hidden_sizes),
        f"model.hidden_sizes: must be a non-empty list of positive widths, got {m.hidden_sizes}",
    )
    need(m.lstm_size >= 1, f"model.lstm_size: must be >= 1, got {m.lstm_size}")
    low, high = LOG_STD_BOUNDS
    need(
        low <= m.log_std_init <= high,
        f"model.log_std_init: must be in [{low:g}, {high:g}], got {m.log_std_init}",
    )
    need(
        m.critic != "separate" or (m.kind in ("auto", "mlp") and not m.lstm),
        "model.critic: separate is for feed-forward MLPs; use shared or auto with "
        f"model.kind {m.kind} and model.lstm {str(m.lstm).lower()}",
    )
    need(a.t_max >= 1, f"algo.t_max: must be >= 1, got {a.t_max}")
    need(0.0 <= a.gamma <= 1.0, f"algo.gamma: must be in [0, 1], got {a.gamma}")
    need(0.0 <= a.gae_lambda <= 1.0, f"algo.gae_lambda: must be in [0, 1], got {a.gae_lambda}")
    need(a.entropy_coef >= 0, f"algo.entropy_coef: must be >= 0, got {a.entropy_coef}")
    need(a.value_coef > 0, f"algo.value_coef: must be > 0, got {a.value_coef}")
    need(a.bound_coef >= 0, f"algo.bound_coef: must be >= 0, got {a.bound_coef}")
    need(
        a.max_grad_norm is None or a.max_grad_norm > 0,
        f"algo.max_grad_norm: must be > 0 or null, got {a.max_grad_norm}",
    )
    need(a.lr > 0 and math.isfinite(a.lr), f"algo.lr: must be a positive number, got {a.lr}")
    need(
        a.lr_half_life is None or (a.lr_half_life > 0 and math.isfinite(a.lr_half_life)),
        f"algo.lr_half_life: must be a positive number of env steps or null, got {a.lr_half_life}",
    )
    need(
        0.0 < a.rmsprop_alpha < 1.0,
        f"algo.rmsprop_alpha: must be in (0, 1), got {a.rmsprop_alpha}",
    )
    need(a.optimizer_eps > 0, f"algo.optimizer_eps: must be > 0, got {a.optimizer_eps}")
    need(
        a.max_staleness is None or a.max_staleness >= 0,
        f"algo.max_staleness: must be >= 0 or null, got {a.max_staleness}",
    )
    need(r.workers is None or r.workers >= 1, f"run.workers: must be >= 1, got {r.workers}")
    need(r.max_steps >= 1, f"run.max_steps: must be >= 1, got {r.max_steps}")
    need(
        r.target_return is None or math.isfinite(r.target_return),
        f"run.target_return: must be a finite number or null, got {r.target_return}",
    )
    need(
        r.time_limit is None or r.time_limit > 0,
        f"run.time_limit: must be > 0 seconds or null, got {r.time_limit}",
    )
    need(r.seed >= 0, f"run.seed: must be >= 0, got {r.seed}")
    need(r.worker_cpus > 0, f"run.worker_cpus: must be > 0, got {r.worker_cpus}")
    need(r.ps_cpus >= 0, f"run.ps_cpus: must be >= 0, got {r.ps_cpus}")
    need(r.monitor_cpus >= 0, f"run.monitor_cpus: must be >= 0, got {r.monitor_cpus}")
    need(cfg.ps.shards >= 1, f"ps.shards: must be >= 1, got {cfg.ps.shards}")
    need(
        0 <= cfg.ps.graph_workers <= MAX_GRAPH_WORKERS,
        f"ps.graph_workers: must be between 0 and {MAX_GRAPH_WORKERS}, got {cfg.ps.graph_workers}",
    )
    need(mon.eval_every > 0, f"monitor.eval_every: must be > 0 seconds, got {mon.eval_every}")
    need(mon.eval_episodes >= 1, f"monitor.eval_episodes: must be >= 1, got {mon.eval_episodes}")
    need(
        mon.keep_checkpoints >= 1,
        f"monitor.keep_checkpoints: must be >= 1, got {mon.keep_checkpoints}",
    )
    need(mon.log_every > 0, f"monitor.log_every: must be > 0 seconds, got {mon.log_every}")
    need(mon.video_every >= 0, f"monitor.video_every: must be >= 0, got {mon.video_every}")
    need(
        r.max_worker_restarts >= 0,
        f"run.max_worker_restarts: must be >= 0, got {r.max_worker_restarts}",
    )
    need(
        r.target_from in TARGET_SOURCES,
        f"run.target_from: must be one of {', '.join(TARGET_SOURCES)}, got {r.target_from!r}",
    )
    need(r.stop_grace >= 0, f"run.stop_grace: must be >= 0 seconds, got {r.stop_grace}")
    need(
        r.healthy_after > 0,
        f"run.healthy_after: must be > 0 seconds, got {r.healthy_after}",
    )
    need(
        r.restart_backoff >= 0,
        f"run.restart_backoff: must be >= 0 seconds, got {r.restart_backoff}",
    )
    return p


def tune_problems(cfg: Config) -> list[str]:
    """The ``tune`` section's settings; its space is checked by ``a3c_ray.config.space``."""
    t, p = cfg.tune, []
    if t.num_samples < 1:
        p.append(f"tune.num_samples: must be >= 1, got {t.num_samples}")
    if t.scheduler not in SCHEDULERS:
        p.append(f"tune.scheduler: must be one of {', '.join(SCHEDULERS)}, got {t.scheduler!r}")
    if t.metric not in METRICS:
        p.append(f"tune.metric: must be one of {', '.join(METRICS)}, got {t.metric!r}")
    if not t.report_every > 0:
        p.append(f"tune.report_every: must be > 0 seconds, got {t.report_every}")
    for name in ("grace_steps", "perturbation_steps"):
        if getattr(t, name) < 1:
            p.append(f"tune.{name}: must be >= 1, got {getattr(t, name)}")
    if t.reduction_factor < 2:
        p.append(f"tune.reduction_factor: must be >= 2, got {t.reduction_factor}")
    if not 0 < t.quantile_fraction <= 0.5:
        p.append(f"tune.quantile_fraction: must be in (0, 0.5], got {t.quantile_fraction}")
    if t.max_concurrent_trials is not None and t.max_concurrent_trials < 1:
        p.append(f"tune.max_concurrent_trials: must be >= 1 or null, got {t.max_concurrent_trials}")
    return p
