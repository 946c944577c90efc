"""Surviving environments that fail, and an environment that fails on purpose.

``RecreateOnError`` keeps a Worker training when its environment raises in ``reset`` or ``step``
(a crashed emulator, a lost simulator connection): the broken env is closed, a new one is made,
and the failed step is reported as a truncation at the last good observation, so the episode is
bootstrapped from V(last obs) like any time limit. Failures are counted, not hidden; an env that
cannot even be reset after several new tries is a real error and propagates.

``FlakyCartPole`` raises at random, for fault-injection tests and for trying the machinery out:
``a3c-ray train --env a3c_ray/FlakyCartPole-v1``. ``StuckCartPole`` hangs instead, as a simulator
can: the run's stop must not wait for it (``run.stop_grace``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

MAX_RESET_TRIES = 3


class EnvFailure(RuntimeError):
    """An environment failed on purpose (FlakyCartPole) or kept failing after being recreated."""


class RecreateOnError(gym.Wrapper):
    def __init__(self, make_env: Callable[[], gym.Env]):
        super().__init__(make_env())
        self._make_env = make_env
        self.failures = 0
        self._last_obs: Any = None
        self._last_seed: int | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._last_seed = seed
        for attempt in range(MAX_RESET_TRIES):
            try:
                obs, info = self.env.reset(seed=seed, options=options)
                self._last_obs = obs
                return obs, info
            except Exception as e:
                self._recreate()
                # A fresh env needs its own seed; derive one so the stream stays reproducible.
                seed = None if self._last_seed is None else self._last_seed + 7919 * self.failures
                if attempt == MAX_RESET_TRIES - 1:
                    raise EnvFailure(
                        f"environment failed to reset {MAX_RESET_TRIES} times: {e!r}"
                    ) from e
        raise AssertionError("unreachable")

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:
            self._recreate()
            return self._last_obs, 0.0, False, True, {"env_error": repr(e)}
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _recreate(self) -> None:
        self.failures += 1
        with contextlib.suppress(Exception):
            self.env.close()
        self.env = self._make_env()


class FlakyCartPole(gym.Wrapper):
    """CartPole-v1 whose ``step`` raises with probability ``fail_prob`` (and ``reset`` with ``reset_fail_prob``)."""

    def __init__(self, fail_prob: float = 0.001, reset_fail_prob: float = 0.0):
        super().__init__(gym.make("CartPole-v1"))
        self.fail_prob = fail_prob
        self.reset_fail_prob = reset_fail_prob
        self._rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed + 1)
        if self._rng.random() < self.reset_fail_prob:
            raise EnvFailure("injected reset failure")
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._rng.random() < self.fail_prob:
            raise EnvFailure("injected step failure")
        return self.env.step(action)


class StuckCartPole(gym.Wrapper):
    """CartPole-v1 whose ``step`` never returns once it has taken ``stuck_after`` steps: a
    simulator that hangs, which no exception reports."""

    def __init__(self, stuck_after: int = 1_000):
        super().__init__(gym.make("CartPole-v1"))
        self.stuck_after = stuck_after
        self.steps_taken = 0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self.steps_taken += 1
        if self.steps_taken > self.stuck_after:
            threading.Event().wait()  # forever
        return self.env.step(action)


FLAKY_ENV_ID = "a3c_ray/FlakyCartPole-v1"
STUCK_ENV_ID = "a3c_ray/StuckCartPole-v1"
BROKEN_ENV_ID = "a3c_ray/BrokenCartPole-v1"


def register() -> None:
    """Register the fault-injection envs (CartPole-v1 inside already has its 500-step time limit)."""
    if FLAKY_ENV_ID not in gym.registry:
        gym.register(
            FLAKY_ENV_ID, entry_point="a3c_ray.envs.faults:FlakyCartPole", disable_env_checker=True
        )
    if STUCK_ENV_ID not in gym.registry:
        gym.register(
            STUCK_ENV_ID, entry_point="a3c_ray.envs.faults:StuckCartPole", disable_env_checker=True
        )
    if BROKEN_ENV_ID not in gym.registry:  # every reset fails: a Worker that cannot start
        gym.register(
            BROKEN_ENV_ID,
            entry_point="a3c_ray.envs.faults:FlakyCartPole",
            kwargs={"fail_prob": 0.0, "reset_fail_prob": 1.0},
            disable_env_checker=True,
        )


def count_failures(env: gym.Env) -> int:
    """Failures survived by the RecreateOnError wrappers in ``env``'s wrapper chain."""
    total = 0
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecreateOnError):
            total += env.failures
        env = env.env
    return total
