"""The Ray metrics of a run never stop it from starting: a Ray whose private method that exports
a counter's first 0 is renamed or changed loses that point, not the ParameterServer."""

from __future__ import annotations

from typing import Any

import pytest
from ray.util import metrics as ray_metrics

from a3c_ray.algo.messages import CheckpointMeta, GradientPush
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.config import Config
from a3c_ray.runtime.metrics import DriverMetrics, ParameterServerMetrics, start_at_zero


def server() -> ParameterServer:
    cfg = Config()
    cfg.model.policy = "categorical"
    cfg.run.workers = 2
    return ParameterServer(cfg, initial_params(cfg, (4,), 2), CheckpointMeta.of(cfg, (4,), 2))


def changed(self: Any, value: float) -> None:
    raise TypeError("_record() missing 1 required positional argument: 'tags'")


@pytest.mark.parametrize("ray_has", ["no _record", "another _record"])
def test_the_parameter_servers_metrics_start_without_rays_private_record(
    monkeypatch: pytest.MonkeyPatch, ray_has: str
) -> None:
    counter = ray_metrics.Counter("a3c_test_guard", "A counter of the test.", ("run",))
    assert start_at_zero(counter, {"run": "t"})  # today's Ray: the 0 is exported
    # Ray's public methods keep working on whatever their private method is now called.
    counted: list[tuple[float, dict[str, str]]] = []
    monkeypatch.setattr(ray_metrics.Counter, "inc", lambda self, v, tags: counted.append((v, tags)))
    monkeypatch.setattr(ray_metrics.Gauge, "set", lambda self, v, tags: None)
    if ray_has == "no _record":
        monkeypatch.delattr(ray_metrics.Metric, "_record")
    else:
        monkeypatch.setattr(ray_metrics.Metric, "_record", changed)
    assert not start_at_zero(counter, {"run": "t"})
    ps = server()
    exported = ParameterServerMetrics("t", ps, every=0.0)
    ps.push(GradientPush(ps.weights() * 0.0, 0, 5, worker=1))
    exported.maybe_export(ps)
    assert (5, {"run": "t", "worker": "1"}) in counted and (1, {"run": "t"}) in counted
    DriverMetrics("t").worker_slot(0)
