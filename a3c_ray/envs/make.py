"""Environment construction: gymnasium ids, Atari preprocessing, vector envs, seeding.

Workers step K copies of an env through gymnasium's ``SyncVectorEnv`` in *same-step* autoreset
mode: when an episode ends, ``step`` returns the first observation of the next episode and puts the
last observation of the finished one in ``info["final_obs"]``. That is what n-step returns need:
a truncated episode is bootstrapped from V(final_obs), a terminated one from 0.

Atari (any id whose entry point is ale-py's) gets the preprocessing of Mnih et al. (2015, 2016):
the base env runs at ``frameskip=1`` and gymnasium's ``AtariPreprocessing`` adds up to 30 no-op
starts, a frame skip of 4 (max over the last two frames) and 84x84 grayscale; then
``FrameStackObservation`` stacks ``env.frame_stack`` frames into a uint8 ``[stack, 84, 84]``
observation. Training envs also end an episode at every life lost (without resetting the game)
and clip rewards to [-1, 1]; evaluation envs play whole games with raw rewards. The statistics
that training reports (``RecordEpisodeStatistics``) are taken below those two wrappers, so they
are always of whole games with raw rewards.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.vector import AutoresetMode

from a3c_ray.config import Config, EnvConfig
from a3c_ray.envs.faults import RecreateOnError
from a3c_ray.envs.faults import register as register_fault_envs

NOOP_MAX = 30
FRAME_SKIP = 4
SCREEN_SIZE = 84
ATARI_FRAME_STACK = 4
MASKED_CARTPOLE_ID = "a3c_ray/MaskedCartPole-v1"


def check_env_id(env_id: str) -> str | None:
    """A one-line problem with ``env_id``, or None when gymnasium knows it and a3c-ray can train it."""
    register_extra_envs()
    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        return f"unknown environment '{env_id}': {str(e).splitlines()[0]}"
    try:
        env = gym.make(env_id)
    except Exception as e:  # an env that cannot even be built is bad input, whatever it raises
        return f"cannot create environment '{env_id}': {type(e).__name__}: {e}".splitlines()[0]
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            return f"environment '{env_id}' has a {type(env.action_space).__name__} action space; only Discrete is supported"
        if not isinstance(env.observation_space, gym.spaces.Box):
            return f"environment '{env_id}' has a {type(env.observation_space).__name__} observation space; only Box is supported"
    finally:
        env.close()
    if is_atari(env_id):
        try:
            import cv2  # noqa: F401  # AtariPreprocessing resizes with OpenCV
        except ImportError:
            return f"environment '{env_id}' needs OpenCV for its preprocessing: pip install 'a3c-ray[atari]'"
    return None


def env_problems(cfg: Config) -> list[str]:
    """The problem with ``env.id``, if any (a check for ``Config.validate``)."""
    problem = check_env_id(cfg.env.id)
    return [f"env.id: {problem}"] if problem else []


_registered = False


def register_extra_envs() -> None:
    """Register a3c-ray's own envs, and Atari through ale-py when it is installed."""
    global _registered
    if _registered:
        return
    _registered = True
    register_fault_envs()
    if MASKED_CARTPOLE_ID not in gym.registry:
        gym.register(
            MASKED_CARTPOLE_ID,
            entry_point="a3c_ray.envs.make:MaskedCartPoleEnv",
            max_episode_steps=500,
            reward_threshold=475.0,
        )
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass


def is_atari(env_id: str) -> bool:
    """True for ids served by ale-py (``ALE/Pong-v5``, ``PongNoFrameskip-v4``, ...)."""
    register_extra_envs()
    try:
        entry = gym.spec(env_id).entry_point
    except gym.error.Error:
        return False
    return isinstance(entry, str) and entry.startswith("ale_py")


def frame_stack(cfg: EnvConfig) -> int:
    """Frames per observation: ``env.frame_stack``, or by default 4 for Atari and 1 otherwise."""
    if cfg.frame_stack is not None:
        return cfg.frame_stack
    return ATARI_FRAME_STACK if is_atari(cfg.id) else 1


class LifeLossTerminal(gym.Wrapper[Any, Any, Any, Any]):
    """Ends an episode when a life is lost, without restarting the game (Mnih et al. 2015).

    The value target stops at a life lost, which speeds up learning that dying is bad. ``reset``
    after such an end takes one no-op step and carries on in the same game; only a real game over
    (or a time limit) resets the emulator.
    """

    def __init__(self, env: gym.Env[Any, Any]):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the game ended during the no-op: start a new one
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
        return obs, info


def _make_atari(cfg: EnvConfig, training: bool, render_mode: str | None) -> gym.Env[Any, Any]:
    # The preprocessing skips frames itself and reads the screen from the emulator: a grayscale
    # base observation is the cheapest one for ALE to hand over at every frame.
    kwargs: dict[str, Any] = {"frameskip": 1, "obs_type": "grayscale", "render_mode": render_mode}
    if cfg.repeat_action_probability is not None:
        kwargs["repeat_action_probability"] = cfg.repeat_action_probability
    env = _base_env(cfg.id, kwargs)
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=NOOP_MAX,
        frame_skip=FRAME_SKIP,
        screen_size=SCREEN_SIZE,
        grayscale_obs=True,
        terminal_on_life_loss=False,  # its version resets the game at each life; see LifeLossTerminal
        scale_obs=False,
    )
    if cfg.max_episode_steps is not None:  # in agent steps, not emulator frames
        env = gym.wrappers.TimeLimit(env, cfg.max_episode_steps)
    # Whole games and raw rewards, below the training-only wrappers.
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if training:
        env = LifeLossTerminal(env)
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    return gym.wrappers.FrameStackObservation(env, frame_stack(cfg))


def _base_env(env_id: str, kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
    """The registered env, recreated whenever it raises (see a3c_ray.envs.faults), so that neither a
    Worker nor an evaluation dies with it; an eval episode cut by a failure ends there."""
    return RecreateOnError(lambda: gym.make(env_id, **kwargs))


def make_env(
    cfg: EnvConfig, training: bool = True, render_mode: str | None = None
) -> gym.Env[Any, Any]:
    """One environment; ``training`` adds Atari's life-loss ends and reward clipping."""
    register_extra_envs()
    if is_atari(cfg.id):
        return _make_atari(cfg, training, render_mode)
    kwargs: dict[str, Any] = {}
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = _base_env(cfg.id, kwargs)
    # Undiscounted returns and lengths of whole episodes, as the training charts report them.
    env = gym.wrappers.RecordEpisodeStatistics(env)
    stack = frame_stack(cfg)
    return gym.wrappers.FrameStackObservation(env, stack) if stack > 1 else env


def make_vector_env(cfg: EnvConfig) -> gym.vector.VectorEnv[Any, Any, Any]:
    """K training environments stepped together, autoreset in the same step (see the module docstring)."""
    return gym.vector.SyncVectorEnv(
        [lambda: make_env(cfg, training=True) for _ in range(cfg.num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def make_eval_env(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env[Any, Any]:
    """One environment for evaluation: whole games, raw rewards."""
    return make_env(cfg, training=False, render_mode=render_mode)


def env_spaces(cfg: EnvConfig) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    env = make_env(cfg, training=False)
    try:
        return env.observation_space, env.action_space  # type: ignore[return-value]
    finally:
        env.close()


class MaskedCartPoleEnv(CartPoleEnv):
    """CartPole that shows only the cart position and the pole angle, not their velocities.

    A partially observed task: a policy that sees one observation cannot tell which way the pole is
    moving, so it needs memory (an LSTM state, or stacked frames) to balance well.
    """

    VISIBLE = (0, 2)  # x, theta; x_dot and theta_dot are hidden

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        full = self.observation_space
        assert isinstance(full, gym.spaces.Box)
        # Scaled by the failure thresholds, so that both inputs span [-1, 1] while the pole is up.
        self.scale = np.array([self.x_threshold, self.theta_threshold_radians], dtype=np.float32)
        idx = list(self.VISIBLE)
        low, high = full.low[idx] / self.scale, full.high[idx] / self.scale
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return self._mask(obs), reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return self._mask(obs), info

    def _mask(self, obs: np.ndarray) -> np.ndarray:
        return (obs[list(self.VISIBLE)] / self.scale).astype(np.float32)
