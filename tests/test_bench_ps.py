"""The ParameterServer alone (``python -m lab ps``): in process, as actors, and its flags.
No speed is asserted here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from a3c_ray.bench import ps_server as pm
from a3c_ray.config import Config
from a3c_ray.errors import UsageError
from lab import cli as lab

from .bench_cli import lab_parse


def test_parameter_server_in_process_applies_gradients() -> None:
    r = pm.ps_in_process(Config(), seconds=0.2)
    assert r["applications_per_second"] > 0
    assert r["us_per_application"] == pytest.approx(1e6 / r["applications_per_second"])


# -- learning curves ----------------------------------------------------------------------------
def test_the_synthetic_pushes_carry_the_norm_of_their_whole_gradient() -> None:
    """As a Worker's router sends them: every shard then clips by the whole gradient's norm."""
    for p in pm._pushes(Config(), 5_000):
        assert p.norm == pytest.approx(float(np.linalg.norm(p.grad)), rel=1e-5)


@pytest.mark.ray
@pytest.mark.long
def test_ps_scale_measures_every_shard_count_wire_and_load(
    ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every transport and shard layout, one wire and one depth: each row starts its own actors
    # (and graphs), so the grid's size is the test's time; other wires and depths parse below.
    argv = ["ps", "--shards", "1,2", "--wire", "bfloat16"]
    argv += ["--pushes-in-flight", "4", "--ps-seconds", "0.3", "--seconds", "1", "--json"]
    assert lab.run(lab_parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["params"] == 4675 and r["worker_pushes_per_second"] > 0
    keys = sorted(
        (row["transport"], row["shards"], row["alone"], row["wire_dtype"], row["in_flight"])
        for row in r["rows"]
    )
    assert keys == sorted(
        (t, s, alone, w, f)
        for t in ("call", "graph")
        for s, alone in ((1, False), (2, False), (2, True))  # one shard alone: S > 1 only
        for w in ("bfloat16",)
        for f in (4,)
    )
    for row in r["rows"]:
        assert row["applications_per_second"] > 0 and len(row["runs"]) == 1
        assert 0 < row["latency_ms_median"] <= row["latency_ms_p90"]
        assert row["ps_cpu_us_per_application"] > 0
        assert row["workers_before_saturation"] == pytest.approx(
            row["applications_per_second"] / r["worker_pushes_per_second"]
        )
        assert row["clients"] == min(2, row["in_flight"])
    here = [x["applications_per_second"] for x in r["rows"] if not x["alone"]]
    assert r["best_applications_per_second"] == max(here)
    assert r["best_on_own_nodes_applications_per_second"] == max(
        x["applications_per_second"] for x in r["rows"]
    )


def test_ps_scale_refuses_unknown_wire_dtypes_and_zero_counts() -> None:
    with pytest.raises(UsageError):
        lab_parse(["ps", "--wire", "float8"])
    with pytest.raises(UsageError):
        lab_parse(["ps", "--shards", "0,2"])
    with pytest.raises(UsageError):
        lab_parse(["ps", "--transport", "grpc"])
