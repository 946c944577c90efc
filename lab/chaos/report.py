"""The figures of a chaos soak (``python -m lab chaos``), from its record alone: faults and
recoveries, checkpoints, dropped gradients, the learning result and each actor's memory over time;
as a table, a JSON file and a plot. Nothing here imports Ray."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout

KINDS = ("worker", "ps", "monitor", "node")
KIND_NAMES = {
    "worker": "Worker killed",
    "ps": "ParameterServer killed",
    "monitor": "Monitor killed",
    "node": "worker node lost",
}
MEMORY_GROWTH_LIMIT = 0.10
"""No actor's resident memory may grow more than this after its first ``memory_after`` seconds."""


def recoveries(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per kind of fault: how many, and seconds until training went on (median, max, never)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        faults = [f for f in record["faults"] if f["kind"] == kind]
        if not faults:
            continue
        times = [f["recovered_after"] for f in faults if f["recovered_after"] is not None]
        out[kind] = {
            "faults": len(faults),
            "median_seconds": round(statistics.median(times), 2) if times else None,
            "max_seconds": max(times) if times else None,
            "never": len(faults) - len(times),
        }
    return out


def checkpoint_figures(record: dict[str, Any]) -> dict[str, Any]:
    seen = Counter(c["state"] for c in record["checkpoints"])
    left = record["files_left"]
    ps = [f for f in record["faults"] if f["kind"] == "ps" and "restored_from" in f["detail"]]
    # Restored from the newest checkpoint at the kill, or from one the Monitor finished after it.
    newest = [
        f
        for f in ps
        if _steps(f["detail"]["restored_from"]) >= _steps(f["detail"]["latest_checkpoint"])
    ]
    return {
        "written": len(record["checkpoints"]),
        "loaded": seen["loaded"],
        "unreadable": seen["unreadable"],
        "pruned_before_read": seen["pruned"],
        "files_left": len(left),
        "files_left_unreadable": sum(v != "loaded" for v in left.values()),
        "restores": len(ps),
        "restores_from_newest": len(newest),
        "lost_env_steps_max": max((f["detail"]["lost_steps"] for f in ps), default=None),
    }


def _steps(checkpoint: str | None) -> int:
    """The env steps in a checkpoint's name (``.../ckpt-<steps>.pt``); -1 for none."""
    m = layout.CHECKPOINT_RE.match(Path(checkpoint or "").name)
    return int(m.group(1)) if m else -1


def learning(record: dict[str, Any], target: float, floor: float) -> dict[str, Any]:
    """When the mean of the last 100 training episodes first reached ``target``, the lowest it
    fell to after, where it ended; held: never below ``floor`` after; kept: held, and ended at the
    target or above (the stability bench's verdicts)."""
    rows = [
        r for r in record["progress"] if r["episodes"] >= 100 and r["mean_return_100"] is not None
    ]
    first = next((r for r in rows if r["mean_return_100"] >= target), None)
    final = rows[-1]["mean_return_100"] if rows else None
    if first is None:
        return {"target": target, "floor": floor, "reached_at": None, "final_mean": final}
    after = [r["mean_return_100"] for r in rows if r["at"] >= first["at"]]
    low = min(after)
    held = low >= floor
    return {
        "target": target,
        "floor": floor,
        "reached_at": first["at"],
        "reached_env_steps": first["env_steps"],
        "lowest_after": round(low, 1),
        "final_mean": round(final, 1) if final is not None else None,
        "held": held,
        "kept": held and final is not None and final >= target,
        "at_or_above_target_after": round(sum(m >= target for m in after) / len(after), 3),
    }


def memory_growth(record: dict[str, Any], after: float) -> list[dict[str, Any]]:
    """Per actor process (a restarted actor is a new one): its RSS when it was ``after`` seconds
    old, at its last sample and at its peak, and the growth from the first to the last; the same
    for its private (anonymous) memory, where the samples have it: RSS less the pages mapped from
    files and shared memory (the libraries' code, the object store's pages it has read). A process
    that did not live past ``after`` seconds with two samples since has no growth figure."""
    by_process: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in record["memory"]:
        by_process[(row["actor"], row["pid"])].append(row)
    out = []
    for (actor, pid), rows in sorted(by_process.items(), key=lambda kv: (kv[0][0], kv[1][0]["at"])):
        rows.sort(key=lambda r: r["at"])
        born = rows[0]["at"] - (rows[0]["age"] or 0.0)
        settled = [r for r in rows if r["at"] - born >= after]
        entry: dict[str, Any] = {
            "actor": actor,
            "pid": pid,
            "from": rows[0]["at"],
            "to": rows[-1]["at"],
            "first_mb": _mb(rows[0]["rss"]),
            "last_mb": _mb(rows[-1]["rss"]),
            "peak_mb": _mb(max(r["rss"] for r in rows)),
            "base_mb": None,
            "growth": None,
            "private_base_mb": None,
            "private_last_mb": None,
            "private_growth": None,
        }
        if len(settled) >= 2:
            first, last = settled[0], settled[-1]
            entry["base_mb"] = _mb(first["rss"])
            entry["growth"] = _growth(first["rss"], last["rss"])
            if "anon" in first and "anon" in last:
                base, end = first["anon"], last["anon"]
                entry["private_base_mb"], entry["private_last_mb"] = _mb(base), _mb(end)
                entry["private_growth"] = _growth(base, end)
        out.append(entry)
    return out


def _growth(base: float, last: float) -> float:
    return round((last - base) / base, 4)


def _mb(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


def figures(
    record: dict[str, Any], target: float, floor: float, memory_after: float, bound: float
) -> dict[str, Any]:
    rec = recoveries(record)
    worst = [k["max_seconds"] for k in rec.values() if k["max_seconds"] is not None]
    never = sum(k["never"] for k in rec.values())
    memory = memory_growth(record, memory_after)
    grown = [m for m in memory if m["growth"] is not None and m["growth"] > MEMORY_GROWTH_LIMIT]
    private = [m for m in memory if m["private_growth"] is not None]
    dropped = record["progress"][-1]["dropped"] if record["progress"] else {}
    summary = record["summary"]
    return {
        "kills": dict(Counter(f["kind"] for f in record["faults"])),
        "recovery": rec,
        "recovery_bound": bound,
        "within_bound": never == 0 and all(w <= bound for w in worst),
        "restarts": {
            "workers": summary.get("worker_restarts"),
            "parameter_server": summary.get("ps_restarts"),
            **{f"ray:{name}": n for name, n in sorted(record["actor_restarts"].items()) if n},
        },
        "checkpoints": checkpoint_figures(record),
        "gradients_dropped": dropped,
        "learning": learning(record, target, floor),
        "memory_after": memory_after,
        "memory": memory,
        "memory_flat": not grown,
        "memory_checked": sum(m["growth"] is not None for m in memory),
        # None where the samples have no private (anonymous) memory.
        "private_memory_flat": (
            all(m["private_growth"] <= MEMORY_GROWTH_LIMIT for m in private) if private else None
        ),
    }


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def format_report(record: dict[str, Any], figs: dict[str, Any], load: tuple[float, float]) -> str:
    plan, s = record["plan"], record["summary"]
    lines = [
        f"chaos soak: {s.get('env_id', '?')}, {s.get('workers', '?')} Workers on "
        f"{plan['worker_nodes']} worker nodes, {plan['seconds']:g} s of training; job "
        f"{record['job_status']}, run ended by {s.get('stopped_because')} at "
        f"{s.get('env_steps', 0):,} env steps; load average {load[0]:.1f} before, "
        f"{load[1]:.1f} after",
        "",
        "| fault | count | training went on after (s): median | max | never |",
        "|---|---|---|---|---|",
    ]
    for kind, r in figs["recovery"].items():
        lines.append(
            f"| {KIND_NAMES[kind]} | {r['faults']} | {_s(r['median_seconds'])} "
            f"| {_s(r['max_seconds'])} | {r['never']} |"
        )
    c, le = figs["checkpoints"], figs["learning"]
    restarts = ", ".join(f"{k} {v}" for k, v in figs["restarts"].items() if v is not None)
    dropped = ", ".join(f"{k} {v}" for k, v in figs["gradients_dropped"].items())
    lines += [
        "",
        f"every fault followed by training within {figs['recovery_bound']:g} s: "
        f"{'yes' if figs['within_bound'] else 'NO'}",
        f"restarts: {restarts}",
        f"checkpoints: {c['written']} written and seen, {c['loaded']} loaded, {c['unreadable']} "
        f"unreadable, {c['pruned_before_read']} pruned before read; {c['files_left']} left at "
        f"the end, {c['files_left_unreadable']} unreadable; ParameterServer restores from the "
        f"newest checkpoint: {c['restores_from_newest']} of {c['restores']} (at most "
        f"{c['lost_env_steps_max'] or 0:,} env steps lost to one)",
        f"gradients dropped: {dropped or 'none'}",
    ]
    if le["reached_at"] is None:
        lines.append(
            f"learning: the mean of the last 100 episodes never reached {le['target']:g} "
            f"(final {_s(le['final_mean'])})"
        )
    else:
        lines.append(
            f"learning: mean of the last 100 episodes first >= {le['target']:g} at "
            f"{le['reached_at']:.0f} s ({le['reached_env_steps']:,} env steps); lowest after "
            f"{le['lowest_after']:.1f}, final {_s(le['final_mean'])}, at or above the target "
            f"{100 * le['at_or_above_target_after']:.0f}% of the time after; held (floor "
            f"{le['floor']:g}): {'yes' if le['held'] else 'no'}; kept: "
            f"{'yes' if le['kept'] else 'no'}"
        )
    lines += [
        "",
        f"memory (RSS, MB) of each actor process; growth from its {figs['memory_after']:g} s "
        "mark to its last sample:",
        "",
        "| actor | pid | seconds | first | at the mark | last | peak | growth "
        "| private at the mark | private last | private growth |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in figs["memory"]:
        lines.append(
            f"| {m['actor']} | {m['pid']} | {m['from']:.0f}-{m['to']:.0f} | {m['first_mb']} "
            f"| {_s(m['base_mb'])} | {m['last_mb']} | {m['peak_mb']} | {_pct(m['growth'])} "
            f"| {_s(m['private_base_mb'])} | {_s(m['private_last_mb'])} "
            f"| {_pct(m['private_growth'])} |"
        )
    limit = f"{100 * MEMORY_GROWTH_LIMIT:.0f}%"
    lines.append(
        f"\nno actor grew more than {limit} after its first {figs['memory_after']:g} s: "
        f"{'yes' if figs['memory_flat'] else 'NO'} ({figs['memory_checked']} processes lived "
        "long enough to tell)"
    )
    if figs["private_memory_flat"] is not None:
        lines.append(
            f"no actor's private (anonymous) memory grew more than {limit}: "
            f"{'yes' if figs['private_memory_flat'] else 'NO'}"
        )
    return "\n".join(lines)


def plot_memory(record: dict[str, Any], path: Path, title: str) -> Path:
    """Each actor process's RSS (and, dashed, its private part) against minutes of the soak, one
    line per process (a restarted actor starts a new one), coloured by role; the faults as ticks
    along the top."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(
            ["the chaos soak needs matplotlib for its plot: pip install matplotlib"]
        ) from None
    by_process: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in record["memory"]:
        by_process[(row["actor"], row["pid"])].append(row)
    roles = sorted({actor for actor, _ in by_process})
    colors = {role: plt.get_cmap("tab10")(i % 10) for i, role in enumerate(roles)}
    fig, ax = plt.subplots(figsize=(10, 5))
    labelled: set[str] = set()
    for (actor, _), rows in sorted(by_process.items()):
        rows.sort(key=lambda r: r["at"])
        ax.plot(
            [r["at"] / 60 for r in rows],
            [r["rss"] / 2**20 for r in rows],
            color=colors[actor],
            marker="." if len(rows) < 3 else None,
            label=None if actor in labelled else actor,
        )
        if all("anon" in r for r in rows):
            ax.plot(
                [r["at"] / 60 for r in rows],
                [r["anon"] / 2**20 for r in rows],
                color=colors[actor],
                linestyle="--",
                linewidth=0.8,
                label=None if "private" in labelled else "private (dashed: anonymous)",
            )
            labelled.add("private")
        labelled.add(actor)
    marks = {"worker": "|", "ps": "v", "monitor": "s", "node": "x"}
    top = ax.get_ylim()[1]
    for kind, marker in marks.items():
        at = [f["at"] / 60 for f in record["faults"] if f["kind"] == kind]
        if at:
            ax.scatter(at, [top] * len(at), marker=marker, color="k", label=KIND_NAMES[kind])
    ax.set_xlabel("minutes of the soak")
    ax.set_ylabel("resident memory (MiB)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
