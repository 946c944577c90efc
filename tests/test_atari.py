"""Atari through ale-py: the papers' preprocessing, training vs evaluation envs, and short runs on Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from a3c_ray.algo import choices
from a3c_ray.algo.models import build_model, get_flat_params
from a3c_ray.algo.worker import Worker
from a3c_ray.commands.evaluate import env_config_from_checkpoint
from a3c_ray.config import Config, EnvConfig
from a3c_ray.envs.atari import FRAME_SKIP, NOOP_MAX
from a3c_ray.envs.make import (
    check_env_id,
    env_spaces,
    make_env,
    make_eval_env,
    make_vector_env,
)

PONG = "ALE/Pong-v5"
# Space Invaders scores 5 to 30 points per alien and has 3 lives: both training-only rules show.
INVADERS = "ALE/SpaceInvaders-v5"


def ale(env: gym.Env[Any, Any]) -> Any:
    return env.unwrapped.ale  # type: ignore[attr-defined]


def play(env: gym.Env[Any, Any], seed: int, max_steps: int = 5_000) -> dict[str, Any]:
    """Random actions until the game is over; what each step and each episode end showed."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    out: dict[str, Any] = {"rewards": [], "ends": [], "episodes": []}
    for _ in range(max_steps):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        out["rewards"].append(float(reward))
        if "episode" in info:
            out["episodes"].append((float(info["episode"]["r"]), int(info["episode"]["l"])))
        if terminated or truncated:
            frame = ale(env).getEpisodeFrameNumber()
            out["ends"].append((ale(env).lives(), frame, ale(env).game_over()))
            if ale(env).game_over():
                return out
            env.reset()
            # A life lost continues the same game: the frame counter runs on.
            out.setdefault("frames_after_reset", []).append(ale(env).getEpisodeFrameNumber())
    raise AssertionError(f"no game over within {max_steps} steps")


def test_atari_observations_are_stacked_84x84_grayscale_uint8_at_frame_skip_4() -> None:
    cfg = EnvConfig(id=PONG)
    obs_space, act_space = env_spaces(cfg)
    assert obs_space.shape == (4, 84, 84) and obs_space.dtype == np.uint8
    assert act_space.n == 6  # v5's minimal action set
    env = make_env(cfg)
    assert env.unwrapped._frameskip == 1  # type: ignore[attr-defined]  # preprocessing skips
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs[0], obs[-1])  # the first stack repeats the reset frame
    before = ale(env).getEpisodeFrameNumber()
    for _ in range(10):
        obs, *_ = env.step(0)
    assert ale(env).getEpisodeFrameNumber() - before == 10 * FRAME_SKIP
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and obs.max() > obs.min()
    assert not np.array_equal(obs[0], obs[-1])
    env.close()


def test_without_max_pool_the_emulator_skips_frames_and_frames_shrink_to_screen_size() -> None:
    cfg = EnvConfig(id=PONG, max_pool=False, screen_size=42)
    obs_space, _ = env_spaces(cfg)
    assert obs_space.shape == (4, 42, 42) and obs_space.dtype == np.uint8
    env = make_env(cfg)
    assert env.unwrapped._frameskip == FRAME_SKIP  # type: ignore[attr-defined]
    obs, _ = env.reset(seed=0)
    before = ale(env).getEpisodeFrameNumber()
    for _ in range(10):
        obs, *_ = env.step(0)
    assert ale(env).getEpisodeFrameNumber() - before == 10 * FRAME_SKIP
    assert obs.shape == (4, 42, 42) and obs.max() > obs.min()
    # The no-op start is counted in the emulator's steps of FRAME_SKIP frames: at most NOOP_MAX.
    frames = set()
    for seed in range(8):  # a seeded reset loads the ROM again: a fraction of a second each
        env.reset(seed=seed)
        frames.add(ale(env).getEpisodeFrameNumber())
    env.close()
    assert all(FRAME_SKIP <= f <= NOOP_MAX for f in frames) and len(frames) > 3, frames


def test_no_op_starts_take_1_to_30_frames() -> None:
    env = make_eval_env(EnvConfig(id=PONG))
    frames = []
    for seed in range(8):  # a seeded reset loads the ROM again: a fraction of a second each
        env.reset(seed=seed)
        frames.append(ale(env).getEpisodeFrameNumber())
    env.close()
    assert all(1 <= f <= NOOP_MAX for f in frames), frames
    assert len(set(frames)) > 3, "no-op starts should vary with the seed"


@pytest.mark.parametrize("stack, shape", [(1, (1, 84, 84)), (2, (2, 84, 84))])
def test_frame_stack_is_a_config_field(stack: int, shape: tuple[int, ...]) -> None:
    obs_space, _ = env_spaces(EnvConfig(id=PONG, frame_stack=stack))
    assert obs_space.shape == shape and obs_space.dtype == np.uint8


def test_frame_stack_defaults_to_none_outside_atari() -> None:
    assert env_spaces(EnvConfig(id="CartPole-v1"))[0].shape == (4,)
    assert env_spaces(EnvConfig(id="CartPole-v1", frame_stack=3))[0].shape == (3, 4)


@pytest.mark.parametrize(
    "env_id, setting, expected",
    [(PONG, None, 0.25), (PONG, 0.0, 0.0), ("PongNoFrameskip-v4", None, 0.0)],
)
def test_sticky_actions_follow_the_config_or_the_id_default(
    env_id: str, setting: float | None, expected: float
) -> None:
    env = make_env(EnvConfig(id=env_id, repeat_action_probability=setting))
    assert ale(env).getFloat("repeat_action_probability") == pytest.approx(expected)
    env.close()


def test_training_env_ends_an_episode_per_life_and_clips_rewards() -> None:
    game = play(make_env(EnvConfig(id=INVADERS), training=True), seed=3)
    assert set(game["rewards"]) <= {0.0, 1.0, -1.0} and max(game["rewards"]) == 1.0
    lives = [lives for lives, _, _ in game["ends"]]
    assert lives == [2, 1, 0], "one episode per life, the last at game over"
    # After a life lost, reset() carries on in the same game rather than restarting it.
    ends_frames = [frame for _, frame, _ in game["ends"][:-1]]
    assert all(a >= b for a, b in zip(game["frames_after_reset"], ends_frames, strict=True))
    # The statistics are of the whole game, with raw points, once, at game over.
    assert len(game["episodes"]) == 1
    raw_return, length = game["episodes"][0]
    assert raw_return > sum(game["rewards"]) and raw_return % 5 == 0
    assert length >= len(game["rewards"])


def test_eval_env_plays_whole_games_with_raw_rewards() -> None:
    game = play(make_eval_env(EnvConfig(id=INVADERS)), seed=3)
    assert len(game["ends"]) == 1 and game["ends"][0][2], "one episode, ended by game over"
    assert max(game["rewards"]) >= 5.0 and all(r % 5 == 0 for r in game["rewards"])
    assert game["episodes"] == [(sum(game["rewards"]), len(game["rewards"]))]


def test_worker_reports_whole_games_when_lives_end_training_episodes() -> None:
    cfg = Config()
    cfg.env.id = INVADERS
    cfg.env.num_envs = 2
    cfg.algo.t_max = 20
    obs, act = env_spaces(cfg.env)
    w = Worker(cfg, 0, tuple(obs.shape), int(act.n))
    torch.manual_seed(0)
    w.set_weights(get_flat_params(build_model(cfg.model, tuple(obs.shape), int(act.n))), 0)
    returns: list[float] = []
    life_ends = 0
    while not returns:
        ro = w.rollout()
        assert ro.obs.dtype == np.uint8 and ro.obs.shape == (20, 2, 4, 84, 84)
        assert set(np.unique(ro.rewards)) <= {0.0, 1.0}
        life_ends += int(ro.terminated.sum())
        returns = ro.episode_returns
        assert w.env_steps < 4_000, "a random Space Invaders game lasts a few hundred steps"
    assert life_ends >= 3, "each life lost ends a training episode"
    assert all(r % 5 == 0 and r > 1 for r in returns), returns


def test_vector_env_batches_uint8_frames() -> None:
    envs = make_vector_env(EnvConfig(id=PONG, num_envs=2))
    obs, _ = envs.reset(seed=[1, 2])
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    envs.close()


def test_atari_ids_pass_the_env_check() -> None:
    assert check_env_id(PONG) is None
    assert check_env_id("ALE/NoSuchGame-v5") is not None


def test_env_fields_are_validated() -> None:
    cfg = Config()
    cfg.env.frame_stack = 0
    cfg.env.repeat_action_probability = 1.5
    problems = cfg.validate(choices.problems)
    assert any(p.startswith("env.frame_stack:") for p in problems)
    assert any(p.startswith("env.repeat_action_probability:") for p in problems)


def test_eval_env_of_a_checkpoint_reads_its_env_settings_or_infers_the_stack() -> None:
    saved = {
        "env_id": PONG,
        "env": {"max_episode_steps": 100, "frame_stack": 1, "repeat_action_probability": 0.0},
        "obs_shape": [1, 84, 84],
        "n_actions": 6,
    }
    cfg = env_config_from_checkpoint(saved)
    assert (cfg.max_episode_steps, cfg.frame_stack, cfg.repeat_action_probability) == (100, 1, 0.0)
    # Older checkpoints store only max_episode_steps: the stack comes from the observation shape.
    cfg = env_config_from_checkpoint(
        {
            "env_id": PONG,
            "env": {"max_episode_steps": None},
            "obs_shape": [1, 84, 84],
            "n_actions": 6,
        }
    )
    assert cfg.frame_stack == 1 and cfg.repeat_action_probability is None
    cfg = env_config_from_checkpoint(
        {"env_id": "CartPole-v1", "env": {}, "obs_shape": [4], "n_actions": 2}
    )
    assert cfg.frame_stack is None


# -- on Ray ------------------------------------------------------------------------------------


def pong_config(run_dir: Path, lstm: bool) -> Config:
    """Pong for a few thousand frames: 2 Workers, the paper's CNN, or the CNN with an LSTM."""
    cfg = Config()
    cfg.env.id = PONG
    cfg.env.num_envs = 1
    cfg.model.kind = "cnn"
    cfg.model.lstm = lstm
    if lstm:
        cfg.env.frame_stack = 1
        cfg.algo.t_max = 20
    else:
        cfg.algo.t_max = 5
    cfg.algo.optimizer = "rmsprop"
    cfg.algo.lr = 7e-4
    cfg.algo.optimizer_eps = 0.1
    cfg.run.workers = 2
    cfg.run.max_steps = 1_000  # agent steps: 4,000 frames
    cfg.run.seed = 0
    cfg.run.progress = False
    cfg.run.run_dir = str(run_dir)
    cfg.monitor.eval_every = 600.0  # only the final evaluation
    cfg.monitor.eval_episodes = 1
    return cfg


@pytest.mark.ray
@pytest.mark.parametrize(
    "lstm", [pytest.param(False, marks=pytest.mark.long), True], ids=["cnn", "cnn_lstm"]
)
def test_short_pong_run_checkpoints_and_evaluates(
    ray_session: None, tmp_path: Path, lstm: bool
) -> None:
    from a3c_ray.commands.evaluate import evaluate_checkpoint, model_from_checkpoint
    from a3c_ray.rundir.checkpoint import load_checkpoint
    from a3c_ray.runtime.session import train

    cfg = pong_config(tmp_path / "pong", lstm)
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0, s
    assert s["stopped_because"] == "max_steps" and s["env_steps"] >= 1_000
    assert s["gradient_updates"] > 0 and s["checkpoint"] and Path(s["checkpoint"]).exists()
    # The Monitor evaluated a whole game of Pong: 21 points to one side.
    assert s["best_eval_return"] is not None and -21 <= s["best_eval_return"] <= 21

    state = load_checkpoint(s["checkpoint"])
    assert state["env_id"] == PONG and list(state["obs_shape"]) == [1 if lstm else 4, 84, 84]
    model = model_from_checkpoint(state)
    assert model.is_recurrent == lstm
    res = evaluate_checkpoint(s["checkpoint"], episodes=1, seed=3)
    assert res["episodes"] == 1 and -21 <= res["mean_return"] <= 21
    assert res["mean_length"] > 200, "a whole game, not one point"


@pytest.mark.ray
def test_large_weights_travel_as_one_object_ref_per_version(ray_session: None) -> None:
    """The CNN's ~2.7 MB of weights go into Ray's object store once per version; replies carry the
    ref, so Workers read shared memory instead of each getting its own serialized copy."""
    import threading

    import ray

    from a3c_ray.algo.messages import GradientPush, PushReply
    from a3c_ray.algo.parameter_server import ParameterServer
    from a3c_ray.runtime.actors import WEIGHTS_BY_REF_BYTES, ParameterServerShell
    from a3c_ray.runtime.remote import resolve

    class Spy(ParameterServer):
        """The plain ParameterServer with the attributes the actor's push expects."""

        _ref = None
        _lock = threading.RLock()
        push_inline = ParameterServerShell.push_inline

        class metrics:
            @staticmethod
            def maybe_export(ps: Any) -> None:
                pass

    cfg = Config()
    cfg.algo.max_staleness = 0
    model = build_model(cfg.model, (4, 84, 84), 6)
    flat = get_flat_params(model)
    assert flat.nbytes > WEIGHTS_BY_REF_BYTES
    ps = Spy(cfg, flat)

    def push(version: int) -> PushReply:
        grad = np.full_like(flat, 1e-3)
        return ParameterServerShell.push(ps, GradientPush(grad, version, 5))  # type: ignore[arg-type]

    first = push(0)  # applied: version 1
    assert first.applied and isinstance(first.weights, ray.ObjectRef)
    again = push(0)  # stale by one version: dropped, and told of version 1 again
    assert not again.applied and again.version == 1
    assert again.weights == first.weights, "one object per version, shared by every reader"
    np.testing.assert_array_equal(resolve(first.weights), ps.weights())
    assert push(1).weights != first.weights  # a new version is a new object

    small = Spy(cfg, get_flat_params(build_model(cfg.model, (4,), 2)))
    reply = ParameterServerShell.push(  # type: ignore[arg-type]
        small, GradientPush(np.zeros_like(small.weights()), 0, 5)
    )
    assert isinstance(reply.weights, np.ndarray), "small weights travel inline"


@pytest.mark.parametrize(
    "name",
    [
        "cartpole",
        "cartpole_throughput",
        "pong",
        "pong_lstm",
        "breakout",
        "breakout_lstm",
        "atari",
        "masked_cartpole_lstm",
    ],
)
def test_shipped_configs_load_validate_and_carry_their_documented_optimizer(name: str) -> None:
    from a3c_ray import configs

    path = configs.resolve(name)
    assert path.parent == configs.DIR and name in configs.names()
    cfg = Config.load(path)
    assert cfg.validate(choices.problems) == []
    if name in ("pong", "pong_lstm", "breakout", "breakout_lstm", "atari"):
        a = cfg.algo
        if name == "breakout_lstm":
            # The LSTM references' shared Adam: under RMSProp's epsilon 3e-3 this agent's small
            # gradients left its policy uniform for 4M agent steps (docs/atari.md, "Breakout").
            assert (a.optimizer, a.optimizer_eps, a.lr) == ("adam", 1e-8, 1e-4)
        else:
            # Shared RMSProp with the paper's decay; the epsilon is TensorFlow's 1e-5 inside the
            # square root restated for torch, which adds it outside (docs/atari.md).
            assert (a.optimizer, a.rmsprop_alpha, a.optimizer_eps) == ("rmsprop", 0.99, 3e-3)
            assert a.lr == 7e-4
        assert a.max_grad_norm == 0.5
        # Every Atari config holds its step size: a run does not depend on its max_steps.
        assert a.lr_anneal is False
        assert a.entropy_coef == 0.01 and a.t_max in (5, 20)
        assert cfg.run.workers is None  # one Worker per CPU
        # The paper's deterministic emulator, as the runs in docs/atari.md.
        assert cfg.env.id.endswith("NoFrameskip-v4") and not cfg.env.repeat_action_probability
        if name in ("breakout", "breakout_lstm"):
            # The A2C baselines' input and network: on 42x42 frames the ball is a faint part of a
            # pixel and the feed-forward agent held at 6-8 (docs/atari.md, "Breakout").
            assert (cfg.model.kind, cfg.env.screen_size, cfg.env.max_pool) == (
                "nature_cnn",
                84,
                True,
            )
        else:
            # pong.yaml's input and convolutions: the references' 42x42 frames and small CNN.
            assert cfg.model.kind == "small_cnn" and cfg.env.screen_size == 42
        assert cfg.model.lstm == name.endswith("_lstm")
        assert cfg.env.frame_stack == (1 if name == "pong_lstm" else 4)


def test_config_names_resolve_to_shipped_files_and_paths_pass_through(tmp_path: Path) -> None:
    from a3c_ray import configs

    assert configs.resolve("pong.yaml") == configs.resolve("pong") == configs.DIR / "pong.yaml"
    mine = tmp_path / "pong.yaml"
    mine.write_text("env: {id: CartPole-v1}\n")
    assert configs.resolve(mine) == mine
    assert configs.resolve("no_such_config") == Path("no_such_config")


@pytest.mark.slow  # measures the emulator, the env and a training push for a while
def test_bench_figures_measure_the_emulator_the_env_and_the_costs(tmp_path: Path) -> None:
    from a3c_ray.bench import atari

    assert atari.raw_ale_fps(PONG, frames=2_000) > 0
    from a3c_ray import configs

    base = Config.load(configs.resolve("pong"))
    base.env.id, base.env.num_envs = PONG, 2
    cfg = atari.atari_config(base, 10.0, tmp_path)
    assert (cfg.run.time_limit, cfg.run.target_return, base.run.time_limit) == (10.0, None, None)
    assert atari.env_fps(cfg.env, steps=200) > 0
    c = atari.costs(cfg, seconds=0.2)
    assert c.steps_per_push == cfg.algo.t_max * 2 == 10
    assert c.worker_ms_per_step > 0 and c.ps_ms_per_push > 0
    assert c.ps_bound_fps == pytest.approx(4 * 10 * 1000 / c.ps_ms_per_push)


BREAKOUT = "BreakoutNoFrameskip-v4"


def lives_lost_without_firing(cfg: EnvConfig, steps: int) -> int:
    """Lives lost (training episodes ended) in ``steps`` no-op steps of a training env: the ball
    only comes into play served."""
    env = make_env(cfg, training=True)
    env.reset(seed=0)
    lost = 0
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            lost += 1
            env.reset()
    env.close()
    return lost


def steps_to_end(env: gym.Env[Any, Any], limit: int) -> tuple[int, bool, bool]:
    """No-op steps until the episode ends (at most ``limit``): (steps, terminated, truncated)."""
    env.reset(seed=0)
    for steps in range(1, limit + 1):
        _, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            return steps, terminated, truncated
    return limit, False, False


def test_breakout_serves_the_ball_at_every_start_and_after_every_life_lost() -> None:
    # With FIRE pressed for it (the default for a game that waits for it), a policy that never
    # presses FIRE still sees the ball in play, and misses it: lives go, game after game.
    assert lives_lost_without_firing(EnvConfig(id=BREAKOUT, screen_size=42), 400) >= 6
    # Without, the ball never comes: no life is ever lost.
    off = EnvConfig(id=BREAKOUT, screen_size=42, fire_reset=False)
    assert lives_lost_without_firing(off, 400) == 0


def test_an_evaluation_game_of_a_policy_that_never_fires_ends() -> None:
    # Served by the wrapper, the no-op policy loses its five lives in a few hundred steps.
    env = make_eval_env(EnvConfig(id=BREAKOUT, screen_size=42))
    steps, terminated, _ = steps_to_end(env, 2_000)
    assert terminated and ale(env).game_over() and steps < 2_000
    # Without the serve, the bound on a game (in agent steps) ends it, truncated.
    never = EnvConfig(id=BREAKOUT, screen_size=42, fire_reset=False, max_episode_steps=300)
    assert steps_to_end(make_eval_env(never), 1_000) == (300, False, True)


def test_every_atari_game_is_bounded_at_27000_agent_steps_by_default() -> None:
    env = make_eval_env(EnvConfig(id=BREAKOUT, screen_size=42))
    limits = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            limits.append(env._max_episode_steps)
        env = env.env  # type: ignore[assignment]
    assert 27_000 in limits


def test_pong_starts_by_itself_and_gets_no_fire() -> None:
    from a3c_ray.envs.atari import FireOnStart

    def wrappers(env: gym.Env[Any, Any]) -> list[type]:
        found = []
        while isinstance(env, gym.Wrapper):
            found.append(type(env))
            env = env.env  # type: ignore[assignment]
        return found

    assert FireOnStart not in wrappers(make_env(EnvConfig(id="PongNoFrameskip-v4"), training=True))
    assert FireOnStart in wrappers(make_env(EnvConfig(id=BREAKOUT), training=True))


def test_an_atari_game_without_a_config_starts_from_the_atari_starting_point() -> None:
    from a3c_ray import configs
    from a3c_ray.envs.make import is_atari

    cfg, note = configs.starting_config(None, "ALE/Seaquest-v5", True, is_atari)
    atari = Config.load(configs.resolve("atari"))
    assert cfg.env.id == "ALE/Seaquest-v5"
    assert (cfg.model.kind, cfg.env.screen_size, cfg.algo.lr) == (
        atari.model.kind,
        atari.env.screen_size,
        atari.algo.lr,
    )
    assert note is not None and "Atari starting point" in note
    # A game with a config of its own keeps it; a non-Atari id without one keeps the defaults.
    assert configs.starting_config(None, BREAKOUT, True, is_atari)[0].run.target_return == 300.0
    plain, plain_note = configs.starting_config(None, "Acrobot-v1", True, is_atari)
    assert plain_note is None and plain.model.kind == Config().model.kind
    # --no-env-config: the package defaults, Atari or not.
    assert configs.starting_config(None, "ALE/Seaquest-v5", False, is_atari)[1] is None
