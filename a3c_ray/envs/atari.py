"""Atari's preprocessing (Mnih et al. 2015, 2016) and the wrappers it uses.

Atari (any id whose entry point is ale-py's) gets the preprocessing of Mnih et al. (2015, 2016):
the base env runs at ``frameskip=1`` and gymnasium's ``AtariPreprocessing`` adds up to 30 no-op
starts, a frame skip of 4 (max over the last two frames) and 84x84 grayscale; then
``FrameStackObservation`` stacks ``env.frame_stack`` frames into a uint8 ``[stack, 84, 84]``
observation. Training envs also end an episode at every life lost (without resetting the game)
and clip rewards to [-1, 1]; evaluation envs play whole games with raw rewards. Games that wait
for FIRE to serve the ball (Breakout) get it pressed at every start and after every life lost, in
training and evaluation alike, and every game is bounded (``MAX_GAME_STEPS``). The statistics
that training reports (``RecordEpisodeStatistics``) are taken below those two wrappers, so they
are always of whole games with raw rewards.
"""

from __future__ import annotations

import time
from typing import Any, SupportsFloat

import gymnasium as gym

from a3c_ray.config import EnvConfig

NOOP_MAX = 30
FRAME_SKIP = 4
ATARI_FRAME_STACK = 4
MAX_GAME_STEPS = 27_000
"""The default bound of an Atari game in agent steps: 108,000 frames, ALE's own cap on ``-v5``
ids and the papers' 30 minutes of play. ``*NoFrameskip-v4`` ids have none of their own, and a
policy that never serves the ball would otherwise hold an evaluation forever."""
FIRE = 1
"""The action index of FIRE in ALE's minimal action sets that have it."""
STARTS_BY_ITSELF = frozenset({"pong"})
"""Games with FIRE among their actions that serve on their own: no FIRE pressed for them by
default (a pressed FIRE would change a shipped config's results, nothing else)."""


class EmulatorClock(gym.Wrapper[Any, Any, Any, Any]):
    """Adds the seconds spent in the wrapped env's ``step`` (the bare emulator) to a total for the
    whole process, which ``emulator_seconds`` reads: the profile's emulator share, apart from the
    preprocessing around it. Two clock reads per emulator step, well under a microsecond."""

    seconds = 0.0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        t0 = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            EmulatorClock.seconds += time.perf_counter() - t0


def emulator_seconds() -> float:
    """Seconds this process has spent inside Atari emulators' ``step`` (0 without Atari)."""
    return EmulatorClock.seconds


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


class FireOnStart(gym.Wrapper[Any, Any, Any, Any]):
    """Presses FIRE after a reset and after every life lost, for games that wait for it to serve
    the ball or start a round (Breakout's serve). The baselines' ``FireResetEnv`` does the first;
    the second keeps training (where a lost life ends the episode) and evaluation (whole games)
    the same game: a policy never has to learn the button that only restarts play. The rewards of
    the pressed steps count as the agent's."""

    def __init__(self, env: gym.Env[Any, Any]):
        super().__init__(env)
        self.lives = 0

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self.env.step(FIRE)
        if terminated or truncated:  # not in any game; kept so that reset always returns a start
            obs, info = self.env.reset(options=options)
        self.lives = self._ale_lives()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self._ale_lives()
        if lives < self.lives and not (terminated or truncated):
            obs, more, terminated, truncated, info = self.env.step(FIRE)
            reward = float(reward) + float(more)
            lives = self._ale_lives()
        self.lives = lives
        return obs, reward, terminated, truncated, info


def wants_fire(env: gym.Env[Any, Any], cfg: EnvConfig) -> bool:
    """Whether ``env`` (an ALE env) gets ``FireOnStart``: ``env.fire_reset``, or by default the
    games whose action set has FIRE, less those that start by themselves."""
    if cfg.fire_reset is not None:
        return cfg.fire_reset
    meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    game = str(getattr(env.unwrapped, "_game", "")).lower()
    return len(meanings) > FIRE and meanings[FIRE] == "FIRE" and game not in STARTS_BY_ITSELF


def base_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    """The ALE env's own settings for ``cfg``: grayscale, where the frames are skipped, sticky
    actions."""
    # A grayscale base observation is the cheapest one for ALE to hand over. With max_pool the
    # preprocessing skips frames itself, reading the screen at the last two of each FRAME_SKIP;
    # without, the emulator repeats the action FRAME_SKIP times in one call and only the last
    # screen is read, and the no-op start counts in those steps (up to NOOP_MAX frames either way).
    skip_in_emulator = not cfg.max_pool
    kwargs: dict[str, Any] = {
        "frameskip": FRAME_SKIP if skip_in_emulator else 1,
        "obs_type": "grayscale",
    }
    if cfg.repeat_action_probability is not None:
        kwargs["repeat_action_probability"] = cfg.repeat_action_probability
    return kwargs


def preprocess(
    env: gym.Env[Any, Any], cfg: EnvConfig, training: bool, stack: int
) -> gym.Env[Any, Any]:
    """The preprocessing around an ALE env made with ``base_kwargs``; ``training`` adds the
    life-loss ends and reward clipping, ``stack`` frames go into an observation."""
    skip_in_emulator = not cfg.max_pool
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=NOOP_MAX // FRAME_SKIP if skip_in_emulator else NOOP_MAX,
        frame_skip=1 if skip_in_emulator else FRAME_SKIP,
        screen_size=cfg.screen_size,
        grayscale_obs=True,
        terminal_on_life_loss=False,  # its version resets the game at each life; see LifeLossTerminal
        scale_obs=False,
    )
    if wants_fire(env, cfg):
        env = FireOnStart(env)
    # In agent steps, not emulator frames.
    env = gym.wrappers.TimeLimit(env, cfg.max_episode_steps or MAX_GAME_STEPS)
    # Whole games and raw rewards, below the training-only wrappers.
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if training:
        env = LifeLossTerminal(env)
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    return gym.wrappers.FrameStackObservation(env, stack)
