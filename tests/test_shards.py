"""The ParameterServer in shards, without Ray: S shards fed through a Worker's ShardRouter apply
exactly what one ParameterServer applies, the wire's half-precision dtypes stay within their
rounding, and checkpoints are whole-model states whatever S."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from a3c_ray.algo import wire
from a3c_ray.algo.messages import CheckpointMeta, GradientPush, PushReply
from a3c_ray.algo.parameter_server import ParameterServer
from a3c_ray.algo.shards import ALIGN, ShardRouter, merge_states, shard_bounds, slice_state
from a3c_ray.config import Config
from a3c_ray.rundir.checkpoint import CheckpointManager, load_latest_good

N = 10_000  # more than ALIGN x 4: aligned slices
META = CheckpointMeta(env_id="CartPole-v1", obs_shape=(4,), n_actions=2)


def config(**sets: object) -> Config:
    cfg = Config()
    cfg.run.max_steps = 2_000  # the learning rate anneals over the pushes below
    for k, v in sets.items():
        cfg.set(k.replace("__", "."), v)
    return cfg


def pushes(n: int = 30, size: int = N, seed: int = 0) -> list[GradientPush]:
    """Gradients of varied scale, half of them over the clipping norm, with episodes on some."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        grad = rng.normal(0, 0.3 if i % 2 else 0.001, size).astype(np.float32)
        episodes = [float(i)] if i % 3 == 0 else []
        out.append(
            GradientPush(
                grad=grad,
                version=max(0, i - 2),
                env_steps=40,
                worker=i % 2,
                episode_returns=episodes,
                episode_lengths=[10] * len(episodes),
                stats={"entropy": 0.5},
            )
        )
    return out


class Sharded:
    """S ParameterServers over the slices of one init, and one Worker's router in front of them."""

    def __init__(self, cfg: Config, init: np.ndarray, shards: int):
        self.router = ShardRouter(init.size, shards, cfg.ps.wire_dtype, cfg.algo.max_staleness)
        self.servers = [
            ParameterServer(cfg, init[lo:hi], META, shard=k)
            for k, (lo, hi) in enumerate(self.router.bounds)
        ]

    def push(self, p: GradientPush) -> PushReply:
        # Each push carries the version the test gives it, on every shard, as one server sees it;
        # the coordinator first, whose verdict the others follow (with max_staleness).
        parts = self.router.split(p)
        first = self.servers[0].push(parts[0])
        rest = self.router.judged(parts[1:], first)
        replies = [first, *(s.push(q) for s, q in zip(self.servers[1:], rest, strict=True))]
        return self.router.merge(replies)

    def state(self) -> dict:
        return merge_states([s.state_dict() for s in self.servers])


def split_versions(router: ShardRouter, version: int) -> None:
    router.versions = [version] * router.shards


def test_bounds_cover_the_vector_in_aligned_contiguous_slices() -> None:
    for n, s in [(N, 1), (N, 3), (677_943, 4), (4_866, 4), (100, 3), (7, 7)]:
        bounds = shard_bounds(n, s)
        assert len(bounds) == s and bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(a < b for a, b in bounds)
        assert all(b == c for (_, b), (c, _) in itertools.pairwise(bounds))
        if n >= ALIGN * s:
            assert all(lo % ALIGN == 0 for lo, _ in bounds)
            # Each cut is the aligned point nearest its share: each slice within ALIGN of n / S.
            assert all(abs((b - a) - n / s) <= ALIGN for a, b in bounds)
    with pytest.raises(ValueError, match="cannot split 3 parameters into 4 shards"):
        shard_bounds(3, 4)


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
@pytest.mark.parametrize("shards", [2, 3])
def test_shards_apply_exactly_what_one_server_applies(optimizer: str, shards: int) -> None:
    cfg = config(algo__optimizer=optimizer, algo__max_grad_norm=0.5, algo__lr_anneal=True)
    init = np.random.default_rng(1).normal(0, 0.1, N).astype(np.float32)
    one = ParameterServer(cfg, init, META)
    many = Sharded(cfg, init, shards)
    for p in pushes():
        split_versions(many.router, p.version)
        a, b = one.push(p), many.push(p)
        assert a.applied and b.applied and a.version == b.version
    whole, merged = one.state_dict(), many.state()
    # Bit for bit: the same clipping factor, learning rate and elementwise optimizer step.
    assert torch.equal(whole["params"], merged["params"])
    for key, value in whole["optimizer"]["state"][0].items():
        assert torch.equal(value, merged["optimizer"]["state"][0][key]), key
    assert many.router.weights.tobytes() == one.weights().tobytes()
    # The counters are the coordinator's, and equal to one server's.
    for key in ("version", "env_steps", "episodes", "gradients_applied"):
        assert merged[key] == whole[key], key
    assert torch.equal(merged["recent_returns"], whole["recent_returns"])
    # Only the coordinator keeps the run's state: the other shards hold their slice alone.
    assert many.servers[0].run is not None and many.servers[0].run.episodes == whole["episodes"]
    assert all(s.run is None for s in many.servers[1:])
    assert "episodes" not in many.servers[1].state_dict()
    with pytest.raises(RuntimeError, match="shard 1 does not coordinate"):
        many.servers[1].progress()
    assert many.servers[1].counts() == many.servers[0].counts()  # its own, as the coordinator's


def test_every_shard_drops_a_gradient_that_is_not_finite() -> None:
    cfg = config()
    many = Sharded(cfg, np.zeros(N, dtype=np.float32), 3)
    grad = np.zeros(N, dtype=np.float32)
    grad[-1] = np.nan  # in the last shard's slice only
    reply = many.push(GradientPush(grad=grad, version=0, env_steps=5))
    assert not reply.applied
    assert [s.dropped_nonfinite for s in many.servers] == [1, 1, 1]
    assert [s.version for s in many.servers] == [0, 0, 0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_wire_stays_within_its_rounding(dtype: str) -> None:
    x = np.random.default_rng(0).normal(0, 1, 100_000).astype(np.float32)
    back = wire.decode(wire.encode(x, dtype), dtype)
    assert wire.encode(x, dtype).nbytes == x.nbytes // 2
    # Round to nearest: half a unit in the last place, 2^-8 with bfloat16's 7 stored bits of
    # mantissa, 2^-11 with float16's 10 (whose subnormals, below 6e-5, lose relative precision).
    bound = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
    big = np.abs(x) > 1e-3
    assert np.max(np.abs(back - x)[big] / np.abs(x)[big]) <= bound
    assert np.array_equal(
        wire.decode(wire.encode(x, "bfloat16"), "bfloat16"),
        torch.from_numpy(x).to(torch.bfloat16).float().numpy(),
    )


def test_bfloat16_wire_trains_within_a_stated_tolerance_of_float32() -> None:
    """30 updates with bfloat16 gradients stay within 1% (relative L2) of the float32 weights'
    movement: the server's master weights and statistics are float32, only the wire rounds."""
    init = np.random.default_rng(1).normal(0, 0.1, N).astype(np.float32)
    f32 = Sharded(config(), init, 2)
    bf16 = Sharded(config(ps__wire_dtype="bfloat16"), init, 2)
    for p in pushes():
        split_versions(f32.router, p.version)
        split_versions(bf16.router, p.version)
        f32.push(p)
        bf16.push(p)
    a, b = f32.state()["params"].numpy(), bf16.state()["params"].numpy()
    moved = np.linalg.norm(a - init)
    assert moved > 0.01
    assert np.linalg.norm(b - a) / moved < 0.01
    # What the Worker receives is the server's weights rounded once to bfloat16.
    assert np.max(np.abs(bf16.router.weights - b) / np.maximum(np.abs(b), 1e-3)) <= 2.0**-8


def test_slices_of_a_state_merge_back_into_it() -> None:
    cfg = config(algo__optimizer="adam")
    one = ParameterServer(cfg, np.zeros(N, dtype=np.float32), META)
    for p in pushes(5):
        one.push(p)
    state = one.state_dict()
    parts = [slice_state(state, lo, hi) for lo, hi in shard_bounds(N, 3)]
    assert [p["params"].numel() for p in parts] == [b - a for a, b in shard_bounds(N, 3)]
    merged = merge_states(parts)
    assert torch.equal(merged["params"], state["params"])
    for key, value in state["optimizer"]["state"][0].items():
        assert torch.equal(value, merged["optimizer"]["state"][0][key])


def test_checkpoint_of_shards_restores_into_any_number_of_shards(tmp_path) -> None:
    cfg = config(algo__optimizer="rmsprop")
    init = np.random.default_rng(2).normal(0, 0.1, N).astype(np.float32)
    many = Sharded(cfg, init, 3)
    for p in pushes(10):
        split_versions(many.router, p.version)
        many.push(p)
    CheckpointManager(tmp_path, keep=2).save({**many.state()})
    state = load_latest_good(tmp_path)
    for shards in (1, 2, 3):
        bounds = shard_bounds(N, shards)
        restored = [
            ParameterServer(cfg, init[lo:hi], META, slice_state(state, lo, hi), shard=k)
            for k, (lo, hi) in enumerate(bounds)
        ]
        again = merge_states([s.state_dict() for s in restored])
        assert torch.equal(again["params"], many.state()["params"])
        assert again["version"] == 10 and again["env_steps"] == 400
        # And they go on exactly as the shards that wrote the checkpoint.
        cont = Sharded.__new__(Sharded)
        cont.router, cont.servers = ShardRouter(N, shards, "float32"), restored
        nxt = pushes(1, seed=9)[0]
        split_versions(cont.router, 10)
        split_versions(many.router, 10)
        nxt.version = 10
        assert cont.push(nxt).applied
        if shards == 3:
            many.push(nxt)
            assert torch.equal(cont.state()["params"], many.state()["params"])


def test_a_checkpoint_of_another_model_is_refused_by_every_shard() -> None:
    cfg = config()
    one = ParameterServer(cfg, np.zeros(N + 5, dtype=np.float32), META)
    state = one.state_dict()
    with pytest.raises(Exception, match=f"holds {N + 5} parameters"):
        ParameterServer(cfg, np.zeros(N // 2, dtype=np.float32), META, state, shard=1)


def test_a_gradient_goes_out_with_the_versions_of_the_weights_it_was_computed_from() -> None:
    """With the push overlapped, a Worker takes a newer reply before it sends the gradient it
    computed on the older weights: each shard must see that gradient's own version (stale by
    one), not the reply's."""
    cfg = config()
    many = Sharded(cfg, np.zeros(N, dtype=np.float32), 2)
    first = many.router.merge(
        [s.push(q) for s, q in zip(many.servers, many.router.split(pushes(1)[0]), strict=True)]
    )
    assert first.version == 1
    # The Worker computes its next gradient on version 1's weights ...
    computed_on = dataclasses.replace(
        pushes(1, seed=1)[0], version=first.version, lineage=first.lineage
    )
    # ... while a reply of version 2 arrives (another push of its own, in flight before).
    many.router.merge(
        [s.push(q) for s, q in zip(many.servers, many.router.split(computed_on), strict=True)]
    )
    assert many.router.versions == [2, 2]
    parts = many.router.split(computed_on)
    assert [q.version for q in parts] == [1, 1]
    many.router.merge([s.push(q) for s, q in zip(many.servers, parts, strict=True)])
    assert [s.drain_stats().staleness_max for s in many.servers] == [1, 1]


def test_a_float16_push_that_overflows_on_the_wire_is_dropped_by_every_shard_and_counted() -> None:
    """7e4 is finite in float32 and inf in float16 (whose largest value is 65,504): the check must
    see what the shards apply, not the Worker's float32 gradient."""
    cfg = config(ps__wire_dtype="float16")
    init = np.random.default_rng(3).normal(0, 0.1, N).astype(np.float32)
    many = Sharded(cfg, init, 2)
    grad = np.random.default_rng(4).normal(0, 0.01, N).astype(np.float32)
    grad[-1] = 7e4  # in shard 1's slice
    reply = many.push(GradientPush(grad=grad, version=0, env_steps=5))
    assert not reply.applied
    assert [s.dropped_nonfinite for s in many.servers] == [1, 1]
    assert [s.version for s in many.servers] == [0, 0]
    # The next push is applied, and weights and statistics stay finite.
    grad[-1] = 0.0
    assert many.push(GradientPush(grad=grad, version=0, env_steps=5)).applied
    state = many.state()
    assert bool(torch.isfinite(state["params"]).all())
    assert all(bool(torch.isfinite(v).all()) for v in state["optimizer"]["state"][0].values())


def test_a_shard_of_several_refuses_a_push_without_the_whole_gradients_norm() -> None:
    """A shard sees one slice: clipping by that slice's own norm would clip each slice apart."""
    cfg = config(ps__shards=2)
    server = ParameterServer(cfg, np.zeros(100, dtype=np.float32), META, shard=1)
    with pytest.raises(ValueError, match="norm of the whole gradient"):
        server.push(GradientPush(grad=np.ones(100, dtype=np.float32), version=0, env_steps=5))
    assert server.env_steps == 0


def test_with_max_staleness_every_shard_follows_the_coordinators_verdict_in_any_order() -> None:
    """Three pushes computed from version 0 reach the coordinator in the order A, B, C and shard 1
    in the order C, B, A. With max_staleness 1, C is two versions stale at the coordinator and
    dropped there; by its own count shard 1 would drop A instead. Each push is applied on both
    shards or on neither."""
    cfg = config(algo__max_staleness=1)
    many = Sharded(cfg, np.zeros(N, dtype=np.float32), 2)
    assert many.router.coordinator_judges
    split_versions(many.router, 0)
    parts = [many.router.split(p) for p in pushes(3)]
    first = [many.servers[0].push(q[0]) for q in parts]
    assert [r.applied for r in first] == [True, True, False] and first[2].stale
    for i in (2, 1, 0):
        rest = many.router.judged(parts[i][1:], first[i])
        assert many.servers[1].push(rest[0]).applied == first[i].applied
    assert [s.version for s in many.servers] == [2, 2]
    assert [(s.gradients_applied, s.dropped_stale) for s in many.servers] == [(2, 1), (2, 1)]
    # Without max_staleness there is no verdict to wait for: the shards are sent to at once.
    assert not ShardRouter(N, 2, "float32").coordinator_judges


def test_the_coordinator_alone_decides_the_stop_and_the_merged_reply_carries_it() -> None:
    """Past ``run.max_steps`` the coordinator says stop; the other shards, which hold no run
    state, never do, and the Worker's merged reply stops because the coordinator's does."""
    cfg = config(run__max_steps=120, ps__shards=2)
    init = np.zeros(N, dtype=np.float32)
    many = Sharded(cfg, init, 2)
    replies = []
    for p in pushes(4):
        parts = many.router.split(p)
        got = [s.push(q) for s, q in zip(many.servers, parts, strict=True)]
        replies.append((got, many.router.merge(got)))
    # 3 pushes of 40 env steps reach 120: the third push's reply is the first to say stop.
    assert [merged.stop for _, merged in replies] == [False, False, True, True]
    assert all(not got[1].stop for got, _ in replies)
    assert many.servers[0].progress().stop_reason == "max_steps"
    assert many.servers[1].env_steps == many.servers[0].env_steps == 160
