"""The Worker as a plain class: rollouts, seeding, bootstrapping data, gradients, and learning without Ray."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from a3c_ray.algo.messages import GradientPush, PushReply
from a3c_ray.algo.models import build_model, get_flat_params, num_params
from a3c_ray.algo.parameter_server import ParameterServer
from a3c_ray.algo.worker import Worker
from a3c_ray.config import Config
from a3c_ray.envs.make import env_spaces


def make_worker(index: int = 0, **overrides: object) -> Worker:
    cfg = Config()
    cfg.env.num_envs = 3
    cfg.algo.t_max = 6
    for k, v in overrides.items():
        cfg.set(k.replace("__", "."), v)
    obs, act = env_spaces(cfg.env)
    w = Worker(cfg, index, tuple(obs.shape), int(act.n))
    torch.manual_seed(123)
    w.set_weights(get_flat_params(build_model(cfg.model, tuple(obs.shape), int(act.n))), 0)
    return w


def test_rollout_has_t_max_by_k_shapes_and_counts_steps() -> None:
    w = make_worker()
    ro = w.rollout()
    assert ro.obs.shape == (6, 3, 4) and ro.obs.dtype == np.float32
    for arr in (
        ro.actions,
        ro.rewards,
        ro.terminated,
        ro.truncated,
        ro.values,
        ro.final_values,
        ro.resets,
    ):
        assert arr.shape == (6, 3)
    assert ro.last_values.shape == (3,)
    assert w.env_steps == 18


def test_same_seed_and_index_give_the_same_rollout_and_other_indices_differ() -> None:
    a, b, c = make_worker(0), make_worker(0), make_worker(1)
    ra, rb, rc = a.rollout(), b.rollout(), c.rollout()
    np.testing.assert_array_equal(ra.obs, rb.obs)
    np.testing.assert_array_equal(ra.actions, rb.actions)
    assert not np.array_equal(ra.obs, rc.obs)


def test_truncated_episodes_carry_a_bootstrap_value_and_terminated_ones_do_not() -> None:
    w = make_worker(env__max_episode_steps=4, algo__t_max=12)
    ro = w.rollout()
    assert ro.truncated.any(), "a 4-step time limit must truncate inside a 12-step rollout"
    assert np.all(ro.final_values[ro.truncated] != 0.0)
    assert np.all(ro.final_values[~ro.truncated] == 0.0)
    # The step after an episode end starts a new episode.
    ended = ro.terminated | ro.truncated
    np.testing.assert_array_equal(ro.resets[1:], ended[:-1])
    lengths = ro.episode_lengths
    assert lengths and all(1 <= n <= 4 for n in lengths)


def test_gradient_pass_recomputes_the_values_seen_while_acting() -> None:
    """forward_sequence reproduces the acting values across episode ends (the LSTM's own case,
    state carried and reset, is in test_models.py)."""
    w = make_worker(env__max_episode_steps=5, algo__t_max=12)
    w.rollout()
    ro = w.rollout()
    assert ro.resets.any()
    _, values = w.model.forward_sequence(
        torch.from_numpy(ro.obs), ro.initial_state, torch.from_numpy(ro.resets)
    )
    np.testing.assert_allclose(values.detach().numpy(), ro.values, rtol=1e-5, atol=1e-6)


def test_compute_gradient_returns_a_finite_flat_gradient_and_loss_stats() -> None:
    w = make_worker()
    grad, stats = w.compute_gradient(w.rollout())
    assert grad.shape == (num_params(w.model),) and grad.dtype == np.float32
    assert np.isfinite(grad).all() and np.abs(grad).sum() > 0
    assert set(stats) == {"policy_loss", "value_loss", "entropy"}
    assert 0 < stats["entropy"] <= np.log(2) + 1e-6


def test_worker_and_parameter_server_round_trip_without_ray() -> None:
    w = make_worker()
    ps = ParameterServer(w.cfg, get_flat_params(w.model))
    w.cfg.run.max_steps = 18 * 5
    result = w.run(ps.push)
    assert result.pushes == 5 and ps.env_steps == 90 and ps.version == 5
    assert w.version == 5
    np.testing.assert_array_equal(get_flat_params(w.model), ps.weights())


def test_each_push_carries_the_workers_slot_incarnation_and_next_sequence_number() -> None:
    """The id a shard keeps each push from being applied twice: the slot, the Worker's own
    incarnation (a restarted Worker counts from 0 again) and its count of pushes."""
    w, again = make_worker(index=2), make_worker(index=2)
    a, b = w.train_step(), w.train_step()
    assert (a.worker, a.seq, b.worker, b.seq) == (2, 0, 2, 1)
    assert a.sender == b.sender and a.sender
    assert again.train_step().sender != a.sender


@pytest.mark.slow
def test_single_worker_learns_cartpole_in_process() -> None:
    """Seeded, no Ray: one Worker and the ParameterServer in one process raise CartPole's return well
    above the random policy's ~22 within 60k steps. Proves the gradient, returns and optimizer fit."""
    cfg = Config()
    cfg.run.max_steps = 60_000
    obs, act = env_spaces(cfg.env)
    torch.manual_seed(0)
    model = build_model(cfg.model, tuple(obs.shape), int(act.n))
    ps = ParameterServer(cfg, get_flat_params(model))
    w = Worker(cfg, 0, tuple(obs.shape), int(act.n))
    w.set_weights(ps.weights(), ps.version)
    w.run(ps.push)
    assert ps.coordinator.mean_return_100() >= 150, (
        f"mean return of the last 100 episodes {ps.coordinator.mean_return_100():.1f}"
    )


def test_overlapped_worker_takes_each_reply_one_rollout_later() -> None:
    """With the push overlapped, each gradient after the first comes from weights one version
    behind the server's (staleness 1 for a lone Worker); the run stops at the same pushes."""
    w = make_worker()
    ps = ParameterServer(w.cfg, get_flat_params(w.model))
    w.cfg.run.max_steps = 18 * 5
    staleness: list[int] = []

    def send(p: GradientPush) -> Callable[[], PushReply]:
        staleness.append(ps.version - p.version)
        reply = ps.push(p)
        return lambda: reply

    result = w.run_overlapped(send)
    assert result.pushes == 5 and ps.env_steps == 90 and ps.version == 5
    assert staleness == [0, 1, 1, 1, 1]
    assert w.version == 5  # the last reply's weights were taken before stopping
    t = result.timings
    assert t["total"] >= sum(t[k] for k in ("env", "forward", "backward", "wait"))


def test_a_starting_worker_spreads_its_envs_over_an_episode() -> None:
    """env i of K starts training i/K of the time limit into an episode, no step of which is
    trained on or counted; MountainCar's random policy never ends an episode early."""
    w = make_worker(env__id="MountainCar-v0", env__num_envs=4)
    assert w.decorrelation_steps() == 200  # the registered time limit
    w.decorrelate(w.decorrelation_steps())
    assert [e.get_wrapper_attr("_elapsed_steps") for e in w.envs.envs] == [0, 50, 100, 150]
    ro = w.rollout()
    assert w.env_steps == ro.rewards.size == 6 * 4 and not ro.episode_returns
    assert [e.get_wrapper_attr("_elapsed_steps") for e in w.envs.envs] == [6, 56, 106, 156]


def test_a_starting_worker_trains_from_the_weights_of_after_spreading_its_envs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a new Worker spreads its envs the others train on: its first gradient comes from the
    newest weights, not from those it pulled before the spread (WorkerShell.train, with an
    in-process ParameterServer in place of the shard actors)."""
    from a3c_ray.runtime import actors

    cfg = Config()
    cfg.env.num_envs, cfg.algo.t_max, cfg.env.decorrelate_steps = 3, 6, 30
    cfg.ps.graph_workers, cfg.run.max_steps = 0, 18 * 8
    obs, act = env_spaces(cfg.env)
    shape, n = tuple(obs.shape), int(act.n)
    ps = ParameterServer(cfg, get_flat_params(build_model(cfg.model, shape, n)))
    other = Worker(cfg, 1, shape, n)
    other.set_weights(*ps.get_weights())
    ps.push(other.train_step())  # the run has trained: a new Worker spreads its envs
    staleness: list[int] = []

    class Shards:
        def __init__(self, handles: list[object], cfg: Config) -> None:
            pass

        def pull(self) -> PushReply:
            weights, version, lineage = ps.get_weights()
            return PushReply(weights.copy(), version, False, True, lineage)

        def send(self, p: GradientPush) -> Callable[[], PushReply]:
            staleness.append(ps.version - p.version)
            reply = ps.push(p)
            return lambda: reply

    monkeypatch.setattr(actors, "ShardedServer", Shards)
    threads = torch.get_num_threads()
    shell = actors.WorkerShell(cfg, 0, shape, n)
    torch.set_num_threads(threads)  # the shell sets one thread for its process
    spread = shell.decorrelate

    def spread_while_another_trains(steps: int) -> bool:
        spread_them = spread(steps)
        for _ in range(3):
            ps.push(other.train_step())
        return spread_them

    monkeypatch.setattr(shell, "decorrelate", spread_while_another_trains)
    # The node it ran on, which Ray's runtime context would give (and start a Ray to give).
    monkeypatch.setattr(shell, "node_id", lambda: "node-0")
    result = shell.train([object()])
    assert ps.gradients_applied > 4 and staleness[0] == 0, staleness
    assert result.node_id == "node-0"


def test_a_worker_spreads_its_envs_only_once_the_weights_have_trained() -> None:
    """At a run's start (version 0) an untrained policy's episodes differ in length: no spread.
    On resume or after a restart (version > 0) the envs are spread."""
    w = make_worker(env__num_envs=4)
    assert not w.spread_envs()
    assert [e.get_wrapper_attr("_elapsed_steps") for e in w.envs.envs] == [0, 0, 0, 0]
    w.set_weights(get_flat_params(w.model), 7)
    assert w.spread_envs()
    # CartPole's untrained episodes end within the 500 steps: each env's time differs.
    assert len({e.get_wrapper_attr("_elapsed_steps") for e in w.envs.envs}) > 1


@pytest.mark.parametrize(
    ("overrides", "steps"),
    [
        ({}, 500),  # CartPole-v1's time limit
        ({"env__max_episode_steps": 300}, 300),
        ({"env__max_episode_steps": 5000}, 0),  # long episodes differ in length anyway
        ({"env__decorrelate_steps": 0}, 0),
        ({"env__decorrelate_steps": 64}, 64),
    ],
)
def test_how_far_a_worker_spreads_its_envs(overrides: dict[str, object], steps: int) -> None:
    assert make_worker(**overrides).decorrelation_steps() == steps
