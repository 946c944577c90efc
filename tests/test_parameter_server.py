"""The ParameterServer as a plain class: applying, dropping, clipping, staleness, stopping."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from a3c_ray.algo.messages import CheckpointMeta, GradientPush
from a3c_ray.algo.optim import saved_optimizer
from a3c_ray.algo.parameter_server import ParameterServer
from a3c_ray.config import Config
from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, load_checkpoint

N = 10
META = CheckpointMeta(env_id="CartPole-v1", obs_shape=(4,), n_actions=2)


def make_ps(**overrides: object) -> ParameterServer:
    cfg = Config()
    for k, v in overrides.items():
        cfg.set(k.replace("__", "."), v)
    return ParameterServer(cfg, np.zeros(N, dtype=np.float32), meta=META)


def push(
    grad: np.ndarray | float = 1.0, version: int = 0, steps: int = 10, **kw: object
) -> GradientPush:
    g = (
        np.full(N, grad, dtype=np.float32)
        if np.isscalar(grad)
        else np.asarray(grad, dtype=np.float32)
    )
    return GradientPush(grad=g, version=version, env_steps=steps, **kw)  # type: ignore[arg-type]


def test_push_applies_gradient_moves_version_and_returns_new_weights() -> None:
    ps = make_ps(algo__optimizer="adam", algo__optimizer_eps=1e-5)
    reply = ps.push(push(1.0))
    assert reply.applied and reply.version == 1 and not reply.stop
    assert reply.weights is not None
    # Adam's first step moves every parameter by lr against the gradient's sign.
    np.testing.assert_allclose(reply.weights, -ps.cfg.algo.lr, rtol=1e-3)
    assert ps.progress().env_steps == 10


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_gradient_is_dropped_and_counted(bad: float) -> None:
    ps = make_ps()
    g = np.ones(N, dtype=np.float32)
    g[3] = bad
    reply = ps.push(push(g))
    assert not reply.applied
    assert reply.weights is None  # the version did not move past the worker's
    assert ps.version == 0 and ps.dropped_nonfinite == 1
    np.testing.assert_array_equal(ps.weights(), np.zeros(N))
    assert ps.progress().gradients_dropped == 1


def test_staleness_is_tracked_and_max_staleness_drops_old_gradients() -> None:
    ps = make_ps(algo__max_staleness=1)
    ps.push(push(version=0))  # staleness 0 -> V=1
    ps.push(push(version=0))  # staleness 1 -> V=2
    reply = ps.push(push(version=0))  # staleness 2 > 1: dropped
    assert not reply.applied and ps.dropped_stale == 1 and ps.version == 2
    assert reply.weights is not None  # the worker is behind: it gets the newest weights
    p = ps.progress()
    assert p.staleness_max == 1 and p.staleness_mean == pytest.approx(0.5)


def test_a_repeated_push_is_applied_once_and_answered_as_the_first_time() -> None:
    """A push sent again (its reply lost, a compiled graph that timed out) changes nothing: not
    the weights, not the counters, not the episodes."""
    ps = make_ps()
    p = push(1.0, worker=1, seq=0, sender="a", episode_returns=[5.0], episode_lengths=[3])
    first = ps.push(p)
    again = ps.push(p)
    assert (again.version, again.applied, again.stop, again.lineage) == (
        first.version,
        first.applied,
        first.stop,
        first.lineage,
    )
    assert again.weights is first.weights
    assert (ps.version, ps.env_steps, ps.coordinator.episodes) == (1, 10, 1)
    # The Worker's next push, and a restarted Worker in the same slot counting from 0 again.
    assert ps.push(push(1.0, version=1, worker=1, seq=1, sender="a")).applied
    assert not ps.push(push(1.0, version=1, worker=1, seq=0, sender="a")).applied  # older
    assert ps.push(push(1.0, version=2, worker=1, seq=0, sender="b")).applied
    assert (ps.version, ps.env_steps) == (3, 30)
    # Pushes without an id (seq -1) are each applied.
    ps.push(push(1.0, version=3))
    ps.push(push(1.0, version=4))
    assert ps.version == 5


def test_gradient_is_clipped_to_global_norm() -> None:
    clipped, reference = make_ps(algo__max_grad_norm=0.5), make_ps(algo__max_grad_norm=None)
    g = np.arange(1, N + 1, dtype=np.float32)
    clipped.push(push(g * 100))
    reference.push(push(g / np.linalg.norm(g) * 0.5))
    np.testing.assert_allclose(clipped.weights(), reference.weights(), rtol=1e-4, atol=1e-7)
    assert clipped.drain_stats().grad_norm == pytest.approx(
        float(np.linalg.norm(g * 100)), rel=1e-5
    )


def test_rmsprop_statistics_are_shared_across_workers() -> None:
    ps = make_ps(algo__optimizer="rmsprop", algo__max_grad_norm=None)
    ps.push(push(1.0, worker=0))
    ps.push(push(1.0, version=1, worker=1))
    state = ps.optimizer.state_dict()["state"]
    assert len(state) == 1  # one flat parameter, one set of statistics
    assert int(state[0]["step"]) == 2


def test_learning_rate_anneals_linearly_to_zero() -> None:
    ps = make_ps(algo__lr_anneal=True, run__max_steps=100)
    ps.push(push(steps=50))
    assert ps.optimizer.param_groups[0]["lr"] == pytest.approx(ps.cfg.algo.lr * 0.5)


def test_learning_rate_halves_every_half_life_of_env_steps_whatever_the_budget() -> None:
    for max_steps in (1_000, 1_000_000):
        ps = make_ps(algo__lr_half_life=100.0, run__max_steps=max_steps)
        ps.push(push(steps=200))
        assert ps.optimizer.param_groups[0]["lr"] == pytest.approx(ps.cfg.algo.lr * 0.25)
        assert ps.drain_stats().lr == pytest.approx(ps.cfg.algo.lr * 0.25)  # ps/learning_rate


def test_a_restored_server_goes_on_at_the_decayed_learning_rate() -> None:
    ps = make_ps(algo__lr_half_life=100.0)
    ps.push(push(steps=100))
    ps.push(push(steps=100, version=1))
    again = make_ps(algo__lr_half_life=100.0)
    again.load_state_dict(ps.state_dict())
    assert again.drain_stats().lr == pytest.approx(ps.cfg.algo.lr / 4)  # from the restore on
    again.push(push(steps=100, version=2))
    # 300 env steps in all: three halvings, not one (the decay counts the restored steps).
    assert again.optimizer.param_groups[0]["lr"] == pytest.approx(ps.cfg.algo.lr / 8)


def test_stops_at_max_steps() -> None:
    ps = make_ps(run__max_steps=25)
    assert not ps.push(push(steps=10)).stop
    assert not ps.push(push(steps=10, version=1)).stop
    reply = ps.push(push(steps=10, version=2))
    assert reply.stop and ps.coordinator.stop_reason == "max_steps"


def test_stops_when_mean_of_last_100_episodes_reaches_target() -> None:
    ps = make_ps(run__target_return=100.0)
    ps.push(push(episode_returns=[200.0] * 99, episode_lengths=[200] * 99))
    assert ps.coordinator.stop_reason is None  # 99 episodes are not 100, however good
    reply = ps.push(push(version=1, episode_returns=[0.0], episode_lengths=[5]))
    assert reply.stop and ps.coordinator.stop_reason == "target"
    assert ps.coordinator.steps_to_target == 20 and ps.coordinator.seconds_to_target is not None
    assert ps.coordinator.mean_return_100() == pytest.approx(198.0)


def test_stops_at_time_limit() -> None:
    ps = make_ps(run__time_limit=1e-9)
    assert ps.push(push()).stop and ps.coordinator.stop_reason == "time_limit"


def test_drain_stats_reports_episodes_and_losses_once() -> None:
    ps = make_ps()
    ps.push(push(episode_returns=[3.0], episode_lengths=[3], stats={"entropy": 0.5}))
    ps.push(push(version=1, stats={"entropy": 0.7}))
    s = ps.drain_stats()
    assert s.episodes == [(10, 3.0, 3)]
    assert s.means["entropy"] == pytest.approx(0.6)
    assert s.updates == 2 and s.pushes == 2
    again = ps.drain_stats()
    assert again.episodes == [] and again.updates == 0


def test_state_dict_round_trip_restores_weights_optimizer_and_counters() -> None:
    ps = make_ps(algo__optimizer="rmsprop")
    for v in range(3):
        ps.push(push(float(v + 1), version=v, episode_returns=[float(v)], episode_lengths=[1]))
    state = ps.state_dict()
    other = make_ps(algo__optimizer="rmsprop")
    other.load_state_dict(state)
    assert (other.version, other.env_steps, other.gradients_applied) == (3, 30, 3)
    np.testing.assert_array_equal(other.weights(), ps.weights())
    assert list(other.coordinator.recent_returns) == [0.0, 1.0, 2.0]
    # Same state, same next step: the optimizer statistics came back too.
    a, b = ps.push(push(0.3, version=3)), other.push(push(0.3, version=3))
    np.testing.assert_array_equal(a.weights, b.weights)


def test_a_restored_server_reports_every_counter_and_steps_exactly_as_the_original(
    tmp_path: Path,
) -> None:
    """What a resumed run (``--resume``, ``--resume auto``) continues from: every counter the
    run reports, through a checkpoint file, and the next gradient applied bit for bit alike."""
    ps = make_ps(algo__optimizer="rmsprop", algo__max_staleness=2)
    ps.push(push(1.0, version=0, worker=0, episode_returns=[3.0], episode_lengths=[3]))
    ps.push(push(0.5, version=0, worker=1, env_restarts=1))  # 1 version stale: applied
    ps.push(push(float("nan"), version=2, worker=0))  # dropped: not finite
    ps.push(push(0.2, version=0, worker=1))  # 2 stale: applied
    ps.push(push(0.2, version=0, worker=1))  # 3 stale: dropped
    ps.note_worker_restarts(2)
    ps.note_worker_restarts(1)  # an older count changes nothing
    state = ps.state_dict()
    CheckpointManager(tmp_path).save(state)
    other = ParameterServer(
        ps.cfg,
        np.zeros(N, dtype=np.float32),
        meta=META,
        restore=load_checkpoint(tmp_path / layout.LATEST),
    )
    before, after = dataclasses.asdict(ps.progress()), dataclasses.asdict(other.progress())
    # Training time goes on from the checkpoint's (and the original's went on since).
    assert after.pop("train_seconds") == state["train_seconds"] <= before.pop("train_seconds")
    assert after.pop("restored_from").endswith("ckpt-50.pt") and before.pop("restored_from") is None
    assert after == before
    assert after["worker_restarts"] == 2 and after["staleness_max"] == 2
    assert after["worker_steps"] == {0: 20, 1: 30} and after["dropped_stale"] == 1
    a, b = ps.push(push(0.3, version=3, worker=0)), other.push(push(0.3, version=3, worker=0))
    np.testing.assert_array_equal(a.weights, b.weights)
    assert dataclasses.asdict(ps.progress())["staleness_mean"] == other.progress().staleness_mean


def test_wrong_gradient_size_is_an_error() -> None:
    ps = make_ps()
    with pytest.raises(ValueError, match="size"):
        ps.push(GradientPush(grad=np.zeros(N + 1, dtype=np.float32), version=0, env_steps=1))


def test_restore_refuses_a_checkpoint_of_another_env_or_model_shape(tmp_path: Path) -> None:
    from a3c_ray.errors import CheckpointError
    from a3c_ray.rundir.checkpoint import CheckpointManager, newest_good_state

    other = make_ps()
    other.meta = dataclasses.replace(META, env_id="Acrobot-v1")
    CheckpointManager(tmp_path / "a").save(other.state_dict())
    with pytest.raises(CheckpointError, match="env_id='Acrobot-v1', this run has 'CartPole-v1'"):
        ParameterServer(
            Config(), np.zeros(N, dtype=np.float32), META, newest_good_state(tmp_path / "a")
        )
    bigger = ParameterServer(Config(), np.zeros(N + 5, dtype=np.float32), META)
    CheckpointManager(tmp_path / "b").save(bigger.state_dict())
    with pytest.raises(
        CheckpointError, match=f"holds {N + 5} parameters, this run's model has {N}"
    ):
        ParameterServer(
            Config(), np.zeros(N, dtype=np.float32), META, newest_good_state(tmp_path / "b")
        )


def test_restore_continues_from_the_newest_good_checkpoint(tmp_path: Path) -> None:
    from a3c_ray.rundir.checkpoint import CheckpointManager, newest_good_state

    ps = make_ps()
    mgr = CheckpointManager(tmp_path)
    for v in range(3):
        ps.push(push(version=v, episode_returns=[float(v)], episode_lengths=[1]))
        mgr.save(ps.state_dict())
    newest = sorted(tmp_path.glob("ckpt-*.pt"))[-1]
    newest.write_bytes(b"PK\x03\x04torn")
    restored = ParameterServer(
        Config(), np.zeros(N, dtype=np.float32), META, newest_good_state(tmp_path)
    )
    assert restored.version == 2 and restored.env_steps == 20 and restored.restored_from is not None
    assert restored.lineage != ps.lineage  # gradients of the old lineage will be dropped
    reply = restored.push(push(version=3, lineage=ps.lineage))
    assert not reply.applied and reply.weights is not None and restored.dropped_resync == 1


def test_a_restored_server_keeps_each_drop_reason() -> None:
    ps = make_ps(algo__max_staleness=0)
    bad = np.ones(N, dtype=np.float32)
    bad[0] = np.nan
    ps.push(push(bad))  # nonfinite
    ps.push(push(version=0))  # applied, V=1
    ps.push(push(version=0))  # stale
    ps.push(push(version=1, lineage="another-server"))  # resync
    ps.push(push(version=1, lineage="another-server"))  # resync
    other = make_ps(algo__max_staleness=0)
    other.load_state_dict(ps.state_dict())
    p = other.progress()
    assert (p.dropped_nonfinite, p.dropped_stale, p.dropped_resync) == (1, 1, 2)
    assert p.gradients_dropped == 4


def test_a_checkpoint_without_the_reasons_restores_its_total() -> None:
    state = make_ps().state_dict()
    for key in ("dropped_nonfinite", "dropped_stale", "dropped_resync"):
        del state[key]
    state["gradients_dropped"] = 5
    other = make_ps()
    other.load_state_dict(state)
    assert other.progress().gradients_dropped == 5


def test_an_unknown_optimizer_is_refused_not_replaced_by_adam() -> None:
    import torch

    from a3c_ray.algo.optim import make_optimizer

    cfg = Config()
    cfg.algo.optimizer = "sgd"
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        make_optimizer([torch.nn.Parameter(torch.zeros(3))], cfg.algo)


def test_update_norm_is_the_size_of_the_step_the_optimizer_took() -> None:
    ps = make_ps(algo__optimizer="rmsprop", algo__optimizer_eps=0.1, algo__max_grad_norm=None)
    before = ps.weights().copy()
    ps.push(push(0.01))
    step = np.linalg.norm(ps.weights() - before)
    s = ps.drain_stats()
    assert s.update_norm == pytest.approx(step, rel=1e-5) and step > 0
    # RMSProp with epsilon 0.1: a gradient 100x smaller moves the weights about 100x less,
    # where Adam would move them by about lr whatever the gradient's size.
    small = make_ps(algo__optimizer="rmsprop", algo__optimizer_eps=0.1, algo__max_grad_norm=None)
    small.push(push(0.0001))
    assert small.drain_stats().update_norm < step / 50
    adam = make_ps(algo__optimizer="adam", algo__optimizer_eps=1e-5, algo__max_grad_norm=None)
    adam.push(push(0.0001))
    # 1e-4 / (1e-4 + epsilon 1e-5) of lr per parameter: 0.91 lr, against 0.0001 for RMSProp.
    expected = adam.cfg.algo.lr * np.sqrt(N) * 1e-4 / (1e-4 + 1e-5)
    assert adam.drain_stats().update_norm == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_a_restored_server_steps_with_its_own_config_and_the_checkpoints_statistics(
    optimizer: str,
) -> None:
    """A search continues a trial from another's checkpoint with a new learning rate: the
    statistics come from the checkpoint, the step size from the config."""
    donor = make_ps(algo__optimizer=optimizer, algo__lr=1e-3)
    for _ in range(3):
        donor.push(push(np.linspace(-1, 1, N), version=donor.version))
    state = donor.state_dict()
    ps = ParameterServer(
        make_ps(algo__optimizer=optimizer, algo__lr=5e-3).cfg,
        np.zeros(N, dtype=np.float32),
        meta=META,
        restore=state,
    )
    assert [g["lr"] for g in ps.optimizer.param_groups] == [5e-3]
    key = "square_avg" if optimizer == "rmsprop" else "exp_avg_sq"
    restored = next(iter(ps.optimizer.state.values()))[key]
    assert np.array_equal(restored.numpy(), next(iter(donor.optimizer.state.values()))[key].numpy())


@pytest.mark.parametrize(("saved", "now"), [("rmsprop", "adam"), ("adam", "rmsprop")])
def test_restore_refuses_the_statistics_of_another_optimizer(saved: str, now: str) -> None:
    """Not a KeyError at the first push: a clear refusal before the server starts."""
    old = make_ps(algo__optimizer=saved)
    old.push(push(1.0))
    state = old.state_dict()
    assert saved_optimizer(state) == saved
    cfg = Config()
    cfg.algo.optimizer = now
    with pytest.raises(CheckpointError, match=f"holds {saved} statistics.*algo.optimizer is {now}"):
        ParameterServer(cfg, np.zeros(N, dtype=np.float32), META, state)
    # A checkpoint written before it recorded the optimizer's name is read from its statistics.
    del state["optimizer_name"]
    assert saved_optimizer(state) == saved
    with pytest.raises(CheckpointError, match=f"holds {saved} statistics"):
        ParameterServer(cfg, np.zeros(N, dtype=np.float32), META, state)


def test_an_evaluation_stops_the_run_at_the_target_only_with_target_from_eval() -> None:
    by_eval = make_ps(run__target_return=18.0, run__target_from="eval")
    assert not by_eval.evaluation_reached(17.9, env_steps=1000, train_seconds=60.0)
    assert by_eval.coordinator.stop_reason is None
    by_eval.push(push(1.0, steps=5000, episode_returns=[21.0] * 100, episode_lengths=[900] * 100))
    assert (
        by_eval.coordinator.stop_reason is None
    )  # a training mean of 21 is not what this run stops on
    assert by_eval.evaluation_reached(18.3, env_steps=4000, train_seconds=240.0)
    p = by_eval.progress()
    assert p.stop_reason == "target"
    # The evaluated weights' steps and seconds, not the server's later ones.
    assert (p.steps_to_target, p.seconds_to_target) == (4000, 240.0)

    by_train = make_ps(run__target_return=18.0)
    assert not by_train.evaluation_reached(20.0, env_steps=4000, train_seconds=240.0)
    assert by_train.coordinator.stop_reason is None


class Clock:
    """A ``time`` module whose ``monotonic`` moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_time_limit_is_reached_without_a_push_and_training_time_ends_at_the_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from a3c_ray.algo import coordinator

    clock = Clock()
    monkeypatch.setattr(coordinator, "time", clock)
    ps = make_ps(run__time_limit=20.0)
    clock.now += 5.0  # before the first gradient: no training time
    ps.push(push(1.0))  # the first gradient applied starts the clock
    clock.now += 19.9
    assert ps.progress().stop_reason is None
    clock.now += 0.2
    p = ps.progress()  # no push since: the polling alone reaches the limit
    assert p.stop_reason == "time_limit"
    assert p.train_seconds == pytest.approx(20.1)
    clock.now += 30.0  # the Workers take their time to stop: training time ended at the stop
    assert ps.progress().train_seconds == pytest.approx(20.1)


def test_a_new_call_of_the_server_actor_is_locked_or_named_here() -> None:
    """Pushes arrive on compiled-graph threads beside ordinary calls, so the actor takes one lock
    per call. A public method added to either class fails here until it is wrapped with
    ``_serialized`` in ``ParameterServerShell`` or added below with its reason."""
    from a3c_ray.runtime.actors import ParameterServerShell

    unlocked = {
        name
        for cls in (ParameterServer, ParameterServerShell)
        for name, value in vars(cls).items()
        if callable(value)
        and not name.startswith("_")
        and not getattr(getattr(ParameterServerShell, name), "serialized", False)
    }
    assert unlocked == {
        # take the lock inside: push_inline is serialized
        "push",
        "push_judging",
        # read what does not change after the actor started
        "node_id",
        "restore_info",
        # helpers of serialized calls and of the constructor, not called remotely
        "check_compatible",
        "load_state_dict",
        "gradients_dropped",
        "reset",
        "weights",
    }
