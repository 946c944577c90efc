"""The text report of ``a3c-ray bench``: the figures of ``bench.measure`` as aligned tables."""

from __future__ import annotations

import math
from typing import Any


def _n(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def _parallel_line(raw: dict[str, Any]) -> list[str]:
    if "parallel" not in raw:
        return []
    par = raw["parallel"]
    each = par["env_steps_per_second"] / par["processes"] / raw["env_steps_per_second"]
    return [
        f"raw limit, {par['processes']} processes at once: {_n(par['env_steps_per_second'])} "
        f"env steps/s in all, each {each:.2f} x one process alone"
    ]


def format_report(r: dict[str, Any]) -> str:
    s, m, raw, ps = r["settings"], r["machine"], r["raw"], r["ps"]
    frames = s["frames_per_step"]
    fps = f" ({_n(raw['frames_per_second'])} frames/s)" if frames > 1 else ""
    if "ale_frames_per_second" in raw:
        fps += f"; bare emulator, no model: {_n(raw['ale_frames_per_second'])} frames/s"
    lines = [
        f"a3c-ray bench: {s['env']}, {s['envs_per_worker']} envs per Worker, t_max {s['t_max']} "
        f"({s['steps_per_push']} env steps per push), {ps['params']:,} parameters",
        f"machine: {m['cpus']} CPUs ({m['cpu_model']}), Ray {m['ray']}, torch {m['torch']}; "
        f"load average {m['loadavg_before']:.1f} before, {m['loadavg_after']:.1f} after; "
        f"medians of {s['repeat']} run(s)",
        "",
        f"raw limit, one process on one core: {_n(raw['env_steps_per_second'])} env steps/s{fps}, "
        f"{_n(raw['env_steps_per_cpu_second'])} per CPU second (per batch of {s['envs_per_worker']}: forward {raw['forward_us_per_batch']:.0f} us, "
        f"sampling {raw['sample_us_per_batch']:.0f} us, env {raw['env_us_per_batch']:.0f} us)",
        *_parallel_line(raw),
        f"ParameterServer: {_n(ps['in_process_applications_per_second'])} gradient applications/s "
        f"in process; as Ray actors ({ps.get('shards', 1)} shard(s), {ps.get('wire_dtype', 'float32')} "
        f"on the wire) {_n(ps['actor_round_trips_per_second'])} round trips/s from one "
        f"client, {_n(ps['actor_applications_per_second'])} applications/s with {ps['in_flight']} "
        "pushes in flight",
        "",
        f"training ({s['seconds']:g} s after {s['warmup_seconds']:g} s of warm-up; "
        "ParameterServer, Monitor and N Workers as `a3c-ray train` runs them)",
        "ratio: env steps/s over (raw limit x workers); ratio/cpu: over the raw limit per CPU second",
        "workers  env steps/s  updates/s  staleness mean/max  ratio  ratio/cpu",
    ]
    for t in r["training"]:
        lines.append(
            f"{t['workers']:>7}  {_n(t['env_steps_per_second']):>11}  {_n(t['updates_per_second']):>9}"
            f"  {t['staleness_mean']:>12.2f}/{t['staleness_max']:<5}  {t['ratio']:>5.2f}"
            f"  {t['ratio_cpu']:>9.2f}"
        )
    for t in r["training"]:
        lines += ["", f"time of each Worker, {t['workers']} Workers:"]
        lines.append(
            "worker  env steps/s  pushes/s    env  forward  backward   push   wait   pull  other"
        )
        for w in t["per_worker"]:
            sp = w["split"]
            lines.append(
                f"{w['worker']:>6}  {_n(w['env_steps_per_second']):>11}  {_n(w['pushes_per_second']):>8}  "
                + "  ".join(
                    f"{100 * sp[k]:>{max(len(k), 5) - 1}.0f}%"
                    for k in ("env", "forward", "backward", "push", "wait", "pull", "other")
                )
            )
    md = r["model"]
    pred = ", ".join(
        f"{n}: {_n(v)}" for n, v in md["predicted_env_steps_per_second"].items() if int(n) <= 16
    )
    if "ale_frames_per_second" in raw:
        lines += [
            "",
            "training frames/s over bare-emulator frames/s x workers: "
            + ", ".join(f"{t['workers']}: {t['ale_ratio']:.2f}" for t in r["training"]),
        ]
    lines += [
        "",
        f"model: one Worker pushes {md['worker_pushes_per_second']:.0f}/s, busy "
        f"{md['worker_busy_ms_per_push']:.2f} ms per push; the ParameterServer applies up to "
        f"{_n(md['ps_applications_per_second'])}/s, so it saturates at "
        f"{md['ps_bound_workers']:.1f} Workers; {md['cores']} CPUs carry at most "
        f"{_n(md['cpu_bound_pushes_per_second'])} pushes/s ({md['cpu_bound_workers']:.1f} Workers)",
        f"predicted env steps/s by Workers: {pred}",
        f"ratio: {r['ratio']:.2f} of the raw limit x {s['workers']} Workers",
    ]
    return "\n".join(lines)


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_seed_row(r: dict[str, Any]) -> str:
    """One seed of ``bench seeds``, a row of the stability table."""
    steps = "-" if r["steps_to_target"] is None else f"{r['steps_to_target'] / 1e3:.0f}k"
    return (
        f"| {r['seed']} | {steps} | {_num(r['seconds_to_target'], '.1f')} "
        f"| {_num(r['final_mean'], '.1f')} | {_num(r['low_after_target'], '.1f')} "
        f"| {'yes' if r['held'] else 'no'} | {r['env_steps'] / 1e3:.0f}k "
        f"| {r['train_seconds']:.0f} |"
    )


STABILITY_HEADER = (
    "| seed | steps to target | s to target | final mean | lowest after target | held "
    "| env steps | train s |\n|---|---|---|---|---|---|---|---|"
)


def format_stability(report: dict[str, Any]) -> str:
    """The report of ``bench seeds``: a row per seed, the counts and the medians."""
    s, st = report["summary"], report["settings"]
    rows = [format_seed_row(r) for r in report["runs"]]
    where = "in one process" if st.get("in_process") else "on Ray"
    lines = [
        f"stability of {st['env']}: {s['seeds']} seeds x {st['steps']:,} env steps, "
        f"{st['workers']} Workers {where}, {st['optimizer']} lr {st['lr']:g}, "
        f"{st['envs_per_worker']} envs x t_max {st['t_max']}",
        STABILITY_HEADER,
        *rows,
        "",
        f"target {s['target']:g}, floor {s['floor']:g}: reached {s['reached']}/{s['seeds']}, "
        f"final >= target {s['final_at_target']}/{s['seeds']}, held (never below the floor "
        f"after the target) {s['held']}/{s['seeds']}, kept (held and final >= target) "
        f"{s['kept']}/{s['seeds']}",
        f"median to target: {_num(s['median_steps_to_target'], ',.0f')} env steps, "
        f"{_num(s['median_seconds_to_target'], '.1f')} s of training; "
        f"median final mean {_num(s['median_final_mean'], '.1f')}",
    ]
    for r in report["runs"]:
        if r.get("trace"):
            from a3c_ray.algo.inprocess import format_trace

            lines += ["", f"seed {r['seed']}, every window:", format_trace(r["trace"])]
    return "\n".join(lines)


PROFILE_PARTS = (
    "emulator",
    "preprocessing",
    "forward",
    "backward",
    "push",
    "pull",
    "wait",
    "other",
    "total",
)


def format_profile(r: dict[str, Any]) -> str:
    """``a3c-ray bench profile`` as a Markdown table: microseconds per agent step per Worker."""
    s, m = r["settings"], r["machine"]
    lines = [
        f"{s['env']}: {s['workers']} Workers x {s['envs_per_worker']} envs, t_max {s['t_max']}, "
        f"model {s['model']}{' + LSTM' if s['lstm'] else ''}, screen {s['screen_size']}, "
        f"max_pool {str(s['max_pool']).lower()}; {s['seconds']:g} s measured"
        f" (median of {s['repeat']}); load average {m['loadavg_before']:.1f} before, "
        f"{m['loadavg_after']:.1f} after; {m['cpu_model']}, {m['cpus']} CPUs",
        "",
        "| us per agent step | " + " | ".join(PROFILE_PARTS) + " | steps/s |",
        "|---" * (len(PROFILE_PARTS) + 2) + "|",
    ]
    for w in r["per_worker"]:
        us = w["us_per_step"]
        lines.append(
            f"| Worker {w['worker']} | "
            + " | ".join(f"{us[k]:,.0f}" for k in PROFILE_PARTS)
            + f" | {w['env_steps_per_second']:,.0f} |"
        )
    n = r["network"]
    lines += [
        "",
        f"training: {r['env_steps_per_second']:,.0f} agent steps/s in all "
        f"(runs: {', '.join(f'{x:,.0f}' for x in r['runs'])})",
        f"ParameterServer: {r['ps_us_per_push']:,.0f} us of CPU per push, "
        f"{r['ps_us_per_step']:,.1f} us per agent step",
        f"network per sample: forward {n['forward_us_per_sample']:,.0f} us (batch of K); "
        f"forward + backward {n['forward_backward_us_per_sample']:,.0f} us in float32, "
        f"{n['forward_backward_bfloat16_us_per_sample']:,.0f} us under bfloat16 autocast "
        "(batch of t_max x K)",
    ]
    return "\n".join(lines)


def format_atari(r: dict[str, Any]) -> str:
    """``bench atari``: the emulator, the preprocessed env and training, in frames per second."""
    lines = [
        f"{r['env_id']}: {r['workers']} Workers of {r['num_envs']} envs"
        f"{' (LSTM)' if r['lstm'] else ''}, {r['train_seconds']:.0f} s of training",
        f"  raw emulator:          {_n(r['raw_ale_fps'])} frames per CPU second",
        f"  preprocessed env:      {_n(r['env_fps'])} frames per CPU second",
        f"  training:              {_n(r['train_fps'])} frames/s (wall clock), "
        f"{_n(r['train_steps_per_second'])} agent steps/s, {r['gradient_updates']:,} updates",
        f"  training / raw:        {r['ratio']:.3f} ({r['ratio_per_worker']:.3f} per Worker)",
    ]
    c = r.get("costs")
    if c:
        lines += [
            f"  Worker CPU per step:   {c['worker_ms_per_step']:.2f} ms "
            f"(one Worker core: {_n(c['worker_fps'])} frames/s)",
            f"  PS CPU per gradient:   {c['ps_ms_per_push']:.2f} ms "
            f"(bound: {_n(c['ps_bound_fps'])} frames/s)",
        ]
    return "\n".join(lines)
