"""The networks: the papers' CNNs, model kinds, and the LSTM state's life in Workers and evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch

from a3c_ray.algo import choices
from a3c_ray.algo.evaluation import run_episodes
from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.models import (
    ActorCritic,
    build_model,
    compute_context,
    cpu_flags,
    get_flat_grad,
    get_flat_params,
    num_params,
    resolve_compute_dtype,
    resolve_kind,
    set_flat_params,
)
from a3c_ray.algo.policy import Policy
from a3c_ray.algo.worker import Worker
from a3c_ray.config import Config, ModelConfig
from a3c_ray.envs.make import env_spaces


def conv_params(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k * k + c_out


@pytest.mark.parametrize(
    "kind, expected",
    [
        # 84 -> 20 -> 9: 32 * 9 * 9 = 2592 features into 256 units (Mnih et al. 2013 / 2016).
        ("cnn", conv_params(4, 16, 8) + conv_params(16, 32, 4) + 2592 * 256 + 256),
        # 84 -> 20 -> 9 -> 7: 64 * 7 * 7 = 3136 features into 512 units (Mnih et al. 2015).
        (
            "nature_cnn",
            conv_params(4, 32, 8)
            + conv_params(32, 64, 4)
            + conv_params(64, 64, 3)
            + 3136 * 512
            + 512,
        ),
        # 84 -> 42 -> 21 -> 11 -> 6: 32 * 6 * 6 = 1152 features into 256 units.
        (
            "small_cnn",
            conv_params(4, 32, 3) + 3 * conv_params(32, 32, 3) + 1152 * 256 + 256,
        ),
    ],
)
def test_cnn_bodies_have_the_papers_layers(kind: str, expected: int) -> None:
    model = build_model(ModelConfig(kind=kind), (4, 84, 84), 6)
    hidden = 512 if kind == "nature_cnn" else 256
    heads = hidden * 6 + 6 + hidden + 1
    assert num_params(model) == expected + heads
    logits, value, state = model(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and value.shape == (3,) and state == ()


def test_small_cnn_on_42x42_frames_ends_in_3x3x32_features() -> None:
    # 42 -> 21 -> 11 -> 6 -> 3, the references' network for their 42x42 input.
    model = build_model(ModelConfig(kind="small_cnn"), (1, 42, 42), 6)
    linear = [m for m in model.body if isinstance(m, torch.nn.Linear)]
    assert linear[0].in_features == 3 * 3 * 32
    assert any(isinstance(m, torch.nn.ELU) for m in model.body)


def test_channels_last_inside_the_body_changes_no_output() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(kind="cnn"), (4, 42, 42), 6)
    frames = torch.randint(0, 256, (3, 4, 42, 42), dtype=torch.uint8)
    logits, value, _ = model(frames)
    x = frames.float() / 255.0
    for layer in list(model.body)[1:]:  # the same layers on a default-layout input
        x = layer(x)
    torch.testing.assert_close(logits, model.policy(x))
    torch.testing.assert_close(value, model.value(x).squeeze(-1))


def test_lstm_head_adds_256_cells_after_the_cnn() -> None:
    ff = build_model(ModelConfig(kind="cnn"), (1, 84, 84), 6)
    rnn = build_model(ModelConfig(kind="cnn", lstm=True), (1, 84, 84), 6)
    assert num_params(rnn) - num_params(ff) == 4 * 256 * (256 + 256) + 2 * 4 * 256
    h, c = rnn.initial_state(2)
    assert h.shape == c.shape == (2, 256) and not h.any()


def test_auto_picks_the_cnn_for_images_and_the_mlp_for_vectors() -> None:
    assert resolve_kind("auto", (4, 84, 84)) == "cnn"
    assert resolve_kind("auto", (4,)) == "mlp"
    assert resolve_kind("auto", (3, 4)) == "mlp"  # stacked vectors are flattened
    assert resolve_kind("nature_cnn", (4, 84, 84)) == "nature_cnn"


def test_cnn_refuses_vector_observations() -> None:
    with pytest.raises(ValueError, match="image observations"):
        build_model(ModelConfig(kind="cnn"), (4,), 2)


def test_pixels_are_scaled_inside_the_model_so_uint8_and_float_inputs_agree() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(kind="cnn"), (4, 84, 84), 6)
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    a, va, _ = model(frames)
    b, vb, _ = model(frames.float())
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(va, vb)


@pytest.mark.parametrize("bf16", [False, True])
def test_scaling_pixels_leaves_the_callers_frames_as_they_were(bf16: bool) -> None:
    """The scale works in place on its own cast copy only, never on a frame handed in."""
    from a3c_ray.algo.models import Scale

    dtype = torch.bfloat16 if bf16 else torch.float32
    for frames in (
        torch.full((2, 4, 8, 8), 255, dtype=torch.uint8),
        torch.full((2, 4, 8, 8), 255.0, dtype=dtype),
    ):
        before = frames.clone()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = Scale()(frames)
        assert torch.equal(frames, before)
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), torch.ones(2, 4, 8, 8))


def test_flat_parameters_round_trip_for_the_cnn_lstm() -> None:
    torch.manual_seed(0)
    a = build_model(ModelConfig(kind="cnn", lstm=True), (1, 84, 84), 6)
    b = build_model(ModelConfig(kind="cnn", lstm=True), (1, 84, 84), 6)
    set_flat_params(b, get_flat_params(a))
    np.testing.assert_array_equal(get_flat_params(a), get_flat_params(b))


def test_cnn_lstm_sequence_pass_matches_step_by_step_acting() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(kind="cnn", lstm=True, lstm_size=16), (1, 84, 84), 4)
    obs = torch.randint(0, 256, (5, 2, 1, 84, 84), dtype=torch.uint8)
    resets = torch.zeros(5, 2, dtype=torch.bool)
    resets[2, 0] = True
    state0 = (torch.randn(2, 16), torch.randn(2, 16))
    state, values = state0, []
    with torch.no_grad():
        for t in range(5):
            _, v, state = model(obs[t], state, resets[t])
            values.append(v)
        _, seq_values = model.forward_sequence(obs, state0, resets)
    torch.testing.assert_close(seq_values, torch.stack(values))


# -- the LSTM state in a Worker and in evaluation, on a scripted env ----------------------------


class Scripted(gym.Env[np.ndarray, int]):
    """Observation [t, 1] at step t of an episode; episodes of the n-th instance last LENGTHS[n]."""

    LENGTHS: ClassVar[list[int]] = [3, 5]
    made: ClassVar[int] = 0

    def __init__(self) -> None:
        self.length = self.LENGTHS[Scripted.made % len(self.LENGTHS)]
        Scripted.made += 1
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 1.0], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), 0.0, self.t == self.length, False, {}


SCRIPTED_ID = "a3c_ray_tests/Scripted-v0"
if SCRIPTED_ID not in gym.registry:
    gym.register(SCRIPTED_ID, entry_point=Scripted)


def scripted_model(seed: int = 0) -> tuple[Config, ActorCritic]:
    cfg = Config()
    cfg.env.id = SCRIPTED_ID
    cfg.env.num_envs = 2
    cfg.algo.t_max = 2
    cfg.model.hidden_sizes = [8]
    cfg.model.lstm = True
    cfg.model.lstm_size = 8
    torch.manual_seed(seed)
    return cfg, build_model(cfg.model, (2,), 2)


@torch.no_grad()
def fresh_episode_values(model: ActorCritic, length: int) -> list[float]:
    """V at each step of one episode, unrolled by hand from a zero state."""
    state, out = model.initial_state(1), []
    for t in range(length):
        _, v, state = model(torch.tensor([[t, 1.0]]), state)
        out.append(float(v))
    return out


def test_worker_lstm_state_is_reset_at_episode_end_and_carried_across_rollouts() -> None:
    """Rollouts of 2 steps on episodes of 3 and 5 steps: episode starts fall inside rollouts and on
    their first step. Every value the Worker saw must equal a hand unroll of that episode from a
    zero state: a state not reset at an episode's start, or not carried into the next rollout,
    gives other values."""
    cfg, model = scripted_model()
    Scripted.made = 0
    w = Worker(cfg, 0, (2,), 2)
    w.set_weights(get_flat_params(model), 0)
    expected = [fresh_episode_values(model, n) for n in Scripted.LENGTHS]
    assert len({round(v, 6) for v in expected[1]}) == 5, "values must tell the steps apart"
    seen = np.concatenate([w.rollout().values for _ in range(8)])  # 16 steps x 2 envs
    for k, length in enumerate(Scripted.LENGTHS):
        want = [expected[k][g % length] for g in range(16)]
        np.testing.assert_allclose(seen[:, k], want, rtol=1e-5, atol=1e-6)


def test_worker_gradient_pass_starts_from_the_rollouts_initial_state() -> None:
    cfg, model = scripted_model()
    Scripted.made = 0
    w = Worker(cfg, 0, (2,), 2)
    w.set_weights(get_flat_params(model), 0)
    for _ in range(3):
        w.rollout()
    ro = w.rollout()  # steps 6-7: env 0 starts an episode at step 6, the rollout's first step
    assert ro.resets[0, 0] and not ro.resets[0, 1]
    assert float(ro.initial_state[0][1].abs().sum()) > 0, "env 1 carries its state in"
    with torch.no_grad():
        _, values = w.model.forward_sequence(
            torch.from_numpy(ro.obs), ro.initial_state, torch.from_numpy(ro.resets)
        )
    np.testing.assert_allclose(values.numpy(), ro.values, rtol=1e-5, atol=1e-6)
    grad, _ = w.compute_gradient(ro)
    assert np.isfinite(grad).all() and np.abs(grad).sum() > 0


def test_evaluation_carries_the_lstm_state_through_an_episode_and_resets_it_between() -> None:
    cfg, model = scripted_model()
    Scripted.made = 0
    env = gym.make(SCRIPTED_ID)  # episodes of 3 steps
    expected = fresh_episode_values(model, 3)
    values: list[float] = []
    model.value.register_forward_hook(lambda m, i, out: values.append(float(out)))
    policy = Policy(model, CheckpointMeta.of(cfg, (2,), 2))
    episodes = run_episodes(policy, env, episodes=2, seed=0)
    assert [e.length for e in episodes] == [3, 3]
    np.testing.assert_allclose(values, expected * 2, rtol=1e-5)


def test_masked_cartpole_hides_the_velocities() -> None:
    obs_space, act_space = env_spaces(Config().env.__class__(id="a3c_ray/MaskedCartPole-v1"))
    assert obs_space.shape == (2,) and act_space.n == 2
    full = gym.make("CartPole-v1")
    masked = gym.make("a3c_ray/MaskedCartPole-v1")
    f, _ = full.reset(seed=5)
    m, _ = masked.reset(seed=5)
    np.testing.assert_allclose(m * masked.unwrapped.scale, f[[0, 2]], rtol=1e-6)  # type: ignore[attr-defined]
    assert masked.spec is not None and masked.spec.max_episode_steps == 500


def test_a_separate_critic_has_its_own_body_that_only_the_value_loss_moves() -> None:
    cfg = ModelConfig(kind="mlp", hidden_sizes=[16, 16], critic="separate")
    shared = build_model(ModelConfig(kind="mlp", hidden_sizes=[16, 16]), (4,), 2)
    model = build_model(cfg, (4,), 2)
    body_params = sum(p.numel() for p in model.body.parameters())
    assert model.value_body is not None and shared.value_body is None
    assert num_params(model) == num_params(shared) + body_params  # one more body of that shape
    obs = torch.randn(5, 4)
    logits, value, _ = model(obs)
    value.sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.body.parameters())
    assert all(p.grad is None or not p.grad.any() for p in model.policy.parameters())
    assert any(p.grad is not None and p.grad.any() for p in model.value_body.parameters())
    model.zero_grad()
    _, value, _ = model(obs)
    logits, _, _ = model(obs)
    logits.sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.value_body.parameters())


def test_a_separate_critic_is_refused_with_an_lstm_or_a_cnn() -> None:
    cfg = Config()
    cfg.model.critic = "separate"
    cfg.model.lstm = True
    assert any("model.critic: separate is for feed-forward MLPs" in p for p in cfg.validate())
    cfg.model.lstm, cfg.model.kind = False, "cnn"
    assert any("model.critic" in p for p in cfg.validate())
    cfg.model.critic = "both"
    assert any(
        "model.critic: must be one of shared, separate" in p for p in cfg.validate(choices.problems)
    )


def _small_worker(compute_dtype: str) -> Worker:
    cfg = Config()
    cfg.env.id = "a3c_ray/MaskedCartPole-v1"
    cfg.env.num_envs = 4
    cfg.algo.t_max = 5
    cfg.algo.compute_dtype = compute_dtype
    cfg.model.kind = "mlp"
    return Worker(cfg, 0, (2,), 2)


def test_bfloat16_passes_give_float32_outputs_and_gradients_close_to_float32s() -> None:
    """The autocast path changes what the passes compute in, not what leaves them: the CNN's
    logits, values and the flat gradient are float32, and within bfloat16's rounding of the
    float32 ones (8 bits of mantissa: about 1% here, far below a gradient's own noise)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(kind="cnn"), (4, 84, 84), 6)
    frames = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    grads = {}
    for name in ("float32", "bfloat16"):
        model.zero_grad()
        with compute_context(name):
            logits, values, _ = model(frames)
        if name == "bfloat16":
            assert logits.dtype == torch.bfloat16  # the passes did run in bfloat16
        (logits.float().logsumexp(-1).sum() + values.float().pow(2).sum()).backward()
        # Autocast keeps the weights, and so their gradients, in float32.
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
        grads[name] = get_flat_grad(model)
    rel = np.linalg.norm(grads["bfloat16"] - grads["float32"]) / np.linalg.norm(grads["float32"])
    assert 0 < rel < 0.05


def test_a_worker_computing_in_bfloat16_hands_float32_to_the_rest_of_its_step() -> None:
    worker = _small_worker("bfloat16")
    ro = worker.rollout()
    assert ro.values.dtype == np.float32 and ro.last_values.dtype == np.float32
    grad, stats = worker.compute_gradient(ro)
    assert all(
        p.grad is not None and p.grad.dtype == torch.float32 for p in worker.model.parameters()
    )
    assert grad.dtype == np.float32 and np.isfinite(grad).all() and np.abs(grad).sum() > 0
    assert all(np.isfinite(v) for v in stats.values())


def test_an_unknown_compute_dtype_is_refused_with_the_known_ones() -> None:
    cfg = Config()
    cfg.algo.compute_dtype = "float16"
    assert (
        "algo.compute_dtype: must be one of float32, bfloat16, auto, got 'float16'"
        in cfg.validate(choices.problems)
    )


def test_auto_computes_in_bfloat16_only_where_the_cpu_has_bfloat16_instructions(
    tmp_path: Path,
) -> None:
    assert (
        resolve_compute_dtype("auto", frozenset({"avx2", "avx512f", "avx512_bf16"})) == "bfloat16"
    )
    assert resolve_compute_dtype("auto", frozenset({"avx2", "amx_bf16", "amx_tile"})) == "bfloat16"
    # AVX-512 alone emulates bfloat16: several times slower than float32.
    assert resolve_compute_dtype("auto", frozenset({"avx2", "avx512f"})) == "float32"
    assert resolve_compute_dtype("float32", frozenset({"avx512_bf16"})) == "float32"
    assert resolve_compute_dtype("bfloat16", frozenset()) == "bfloat16"
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "none")) == frozenset()
    worker = _small_worker("auto")
    assert worker.compute_dtype in ("float32", "bfloat16")
    assert worker.compute_dtype == resolve_compute_dtype("auto")


@pytest.mark.parametrize("kind", ["small_cnn", "mlp"])
def test_lstm_sequence_pass_batches_the_body_and_matches_stepping_the_whole_net(kind: str) -> None:
    """forward_sequence runs the body over all T*K inputs at once and steps only the LSTM cell:
    its outputs and gradient must equal those of the net stepped one time step at a time, with a
    state carried in and an episode starting inside the rollout."""
    torch.manual_seed(0)
    shape = (4, 42, 42) if kind == "small_cnn" else (3,)
    model = build_model(ModelConfig(kind=kind, lstm=True, lstm_size=16), shape, 3)
    t, k = 4, 3
    obs = torch.rand(t, k, *shape) * (255 if kind == "small_cnn" else 1)
    if kind == "small_cnn":
        obs = obs.to(torch.uint8)
    resets = torch.zeros(t, k, dtype=torch.bool)
    resets[2, 1] = True
    state = tuple(torch.randn(k, 16) for _ in range(2))

    def loss(logits: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return logits.logsumexp(-1).sum() + values.pow(2).sum()

    model.zero_grad()
    logits, values = model.forward_sequence(obs, state, resets)
    loss(logits, values).backward()
    batched = get_flat_grad(model).copy()
    model.zero_grad()
    s, stepped = state, []
    for i in range(t):
        lg, v, s = model(obs[i], s, resets[i])
        stepped.append((lg, v))
    want_logits = torch.stack([lg for lg, _ in stepped])
    want_values = torch.stack([v for _, v in stepped])
    loss(want_logits, want_values).backward()
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(values, want_values, rtol=1e-5, atol=1e-6)
    assert np.abs(batched).sum() > 0
    np.testing.assert_allclose(batched, get_flat_grad(model), rtol=1e-4, atol=1e-6)
