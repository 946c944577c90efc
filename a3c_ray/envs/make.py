"""Environment construction: gymnasium ids, Atari preprocessing, vector envs, seeding.

Workers step K copies of an env through gymnasium's ``SyncVectorEnv`` in *same-step* autoreset
mode: when an episode ends, ``step`` returns the first observation of the next episode and puts the
last observation of the finished one in ``info["final_obs"]``. That is what n-step returns need:
a truncated episode is bootstrapped from V(final_obs), a terminated one from 0.

Atari (any id whose entry point is ale-py's) gets the preprocessing of ``a3c_ray.envs.atari``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from a3c_ray.config import Config, EnvConfig
from a3c_ray.envs import atari
from a3c_ray.envs.faults import RecreateOnError
from a3c_ray.envs.faults import register as register_fault_envs
from a3c_ray.envs.masked import MASKED_CARTPOLE_ID
from a3c_ray.errors import install_hint


def check_env_id(env_id: str) -> str | None:
    """A one-line problem with ``env_id`` (and no kwargs or wrappers), or None."""
    return check_env(EnvConfig(id=env_id))


def check_env(cfg: EnvConfig, search_cwd: bool = True) -> str | None:
    """A one-line problem with the env ``cfg`` describes, or None when a3c-ray can train it.
    ``search_cwd``: as for ``make_env``."""
    register_extra_envs()
    env_id = cfg.id
    if ":" not in env_id:
        try:
            gym.spec(env_id)
        except gym.error.Error as e:
            return f"unknown environment '{env_id}': {str(e).splitlines()[0]}"
    try:
        env = _make_base(cfg, None, search_cwd)
        env = _wrap(env, cfg.wrappers, search_cwd)
    except EnvSpecError as e:
        return str(e)
    except Exception as e:  # an env that cannot even be built is bad input, whatever it raises
        return f"cannot create environment '{env_id}': {type(e).__name__}: {e}".splitlines()[0]
    try:
        problem = action_space_problem(env.action_space)
        if problem:
            return f"environment '{env_id}' {problem}"
        if not isinstance(env.observation_space, gym.spaces.Box):
            return f"environment '{env_id}' has a {type(env.observation_space).__name__} observation space; only Box is supported"
    finally:
        env.close()
    if is_atari(env_id):
        try:
            import cv2  # noqa: F401  # AtariPreprocessing resizes with OpenCV
        except ImportError:
            return f"environment '{env_id}' needs OpenCV for its preprocessing: {install_hint('atari')}"
    return None


class EnvSpecError(ValueError):
    """An env id or wrapper path that names nothing usable; the message is one line."""


TRUST_ENV_HINT = "pass --trust-env (trust_env=True in Python) to import it"
"""How a user opts in to an env that a checkpoint or a run directory names by import path."""


def import_paths(cfg: EnvConfig) -> list[str]:
    """The modules building the env ``cfg`` would import, as named: its id in ``module:Name``
    form (gymnasium's ``module:EnvId`` too: importing the module registers the id) and each of
    its wrappers. A registered id names none: only code already imported registered it."""
    return ([cfg.id] if ":" in cfg.id else []) + [str(w) for w in cfg.wrappers]


def untrusted_env_problem(
    cfg: EnvConfig, source: str, named: EnvConfig | None = None
) -> str | None:
    """Why the env ``cfg``, read from ``source`` (a checkpoint, a run directory: data, which anyone
    who could write it may have crafted), is not built without an opt-in: the import paths in it
    that the user did not name themselves (in ``named``, the env of their own flags or config);
    None when it names none.

    Importing a module runs its code, and an env class or factory is called with the kwargs the
    same data holds: ``os:system`` with ``{"command": ...}`` runs a command."""
    own = set(import_paths(named)) if named is not None else set()
    unnamed = [p for p in import_paths(cfg) if p not in own]
    if not unnamed:
        return None
    listed = ", ".join(f"'{p}'" for p in unnamed)
    return (
        f"{source} names its env by import path ({listed}), and importing it runs that code: "
        f"{TRUST_ENV_HINT} only if you trust where it came from"
    )


def _import(path: str, what: str, search_cwd: bool = True) -> Any:
    """The object ``package.module:name`` names, importing the module from the working directory
    too (as ``python -m`` would) with ``search_cwd``; None when the module has no such name."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise EnvSpecError(f"{what} '{path}': expected package.module:Name")
    if search_cwd and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # ImportError, or whatever the module raises while it loads
        raise EnvSpecError(
            f"{what} '{path}': cannot import {module}: {type(e).__name__}: {e}".splitlines()[0]
        ) from None
    return getattr(mod, name, None)


def _make_base(
    cfg: EnvConfig, render_mode: str | None, search_cwd: bool = True, **extra: Any
) -> gym.Env[Any, Any]:
    """The env before a3c-ray's wrappers: ``gym.make(id)`` for a registered id or gymnasium's
    ``module:EnvId``; a class or factory called with ``env.kwargs`` for ``package.module:Name``."""
    kwargs = {**cfg.kwargs, **extra}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if ":" in cfg.id:
        target = _import(cfg.id, "environment", search_cwd)
        if target is not None:
            if not callable(target):
                raise EnvSpecError(
                    f"environment '{cfg.id}' is a {type(target).__name__}, not an env class or factory"
                )
            env = target(**kwargs)
            if not isinstance(env, gym.Env):
                raise EnvSpecError(
                    f"environment '{cfg.id}' made a {type(env).__name__}, not a gymnasium.Env"
                )
            if cfg.max_episode_steps is not None:
                env = gym.wrappers.TimeLimit(env, cfg.max_episode_steps)
            return env
        # gymnasium's own form: importing the module registered the id after the colon
    if cfg.max_episode_steps is not None and not is_atari(cfg.id):
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    return gym.make(cfg.id, **kwargs)


def _wrap(
    env: gym.Env[Any, Any], wrappers: list[str], search_cwd: bool = True
) -> gym.Env[Any, Any]:
    for path in wrappers:
        wrapper = _import(path, "env.wrappers: wrapper", search_cwd)
        if not callable(wrapper):
            raise EnvSpecError(f"env.wrappers: wrapper '{path}' is not a wrapper class or function")
        env = wrapper(env)
        if not isinstance(env, gym.Env):
            raise EnvSpecError(
                f"env.wrappers: wrapper '{path}' returned a {type(env).__name__}, not a gymnasium.Env"
            )
    return env


def env_problems(cfg: Config) -> list[str]:
    """The problem with ``env.id``, if any, and with a ``model.policy`` its action space cannot
    take (a check for ``Config.validate``)."""
    problem = check_env(cfg.env)
    if not problem:
        if cfg.model.policy not in ("categorical", "gaussian"):
            return []
        wanted = policy_for(env_spaces(cfg.env)[1])
        if wanted == cfg.model.policy:
            return []
        return [
            f"model.policy: {cfg.model.policy} does not fit the {wanted} actions of "
            f"'{cfg.env.id}'; use {wanted} or auto"
        ]
    return [problem if problem.startswith("env.") else f"env.id: {problem}"]


def action_space_problem(space: gym.Space[Any]) -> str | None:
    """Why a3c-ray cannot act in ``space``, or None: Discrete from 0, or a 1-D Box with finite
    bounds. (The policy's actions count from 0: a ``Discrete(n, start=s)`` env would be sent
    actions s below the ones it means, and never its top s.)"""
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            return (
                f"has a Discrete action space starting at {int(space.start)}; a3c-ray's actions "
                f"count from 0 (Discrete({int(space.n)})): wrap it to take 0..{int(space.n) - 1}"
            )
        return None
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1:
            return (
                f"has a Box action space of shape {space.shape}; only 1-D Box actions are supported"
            )
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            return "has a Box action space with infinite bounds; only finite bounds are supported"
        return None
    return f"has a {type(space).__name__} action space; only Discrete and 1-D Box are supported"


def policy_for(space: gym.Space[Any]) -> str:
    """The ``model.policy`` an action space takes: categorical for Discrete, gaussian for Box."""
    return "gaussian" if isinstance(space, gym.spaces.Box) else "categorical"


def action_size(space: gym.Space[Any]) -> int:
    """Discrete: the number of actions; Box: the number of dimensions."""
    if isinstance(space, gym.spaces.Box):
        return int(space.shape[0])
    return int(space.n)  # type: ignore[attr-defined]


def clip_actions(env: Any, actions: np.ndarray) -> np.ndarray:
    """Actions as the env takes them: a Gaussian policy's samples clipped to a Box's bounds (the
    policy learns from the unclipped sample); Discrete actions as they are."""
    space = getattr(env, "single_action_space", None) or env.action_space
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high).astype(space.dtype, copy=False)
    return actions


def action_bounds(env: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The low and high bounds of the Box actions of an env, a vector env (its single env's) or an
    action space; None for other actions."""
    space = getattr(env, "single_action_space", None) or getattr(env, "action_space", env)
    if isinstance(space, gym.spaces.Box):
        return space.low, space.high
    return None


def resolve_policy(cfg: Config) -> None:
    """Set ``model.policy: auto`` to the distribution the env's action space takes, so that every
    actor, the saved config and the checkpoints say which it is."""
    if cfg.model.policy == "auto":
        cfg.model.policy = policy_for(env_spaces(cfg.env)[1])


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
            entry_point="a3c_ray.envs.masked:MaskedCartPoleEnv",
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
    return atari.ATARI_FRAME_STACK if is_atari(cfg.id) else 1


def _make_atari(
    cfg: EnvConfig, training: bool, render_mode: str | None, search_cwd: bool
) -> gym.Env[Any, Any]:
    env = _base_env(cfg, render_mode, search_cwd, timed=True, **atari.base_kwargs(cfg))
    return atari.preprocess(env, cfg, training, frame_stack(cfg))


def _base_env(
    cfg: EnvConfig,
    render_mode: str | None,
    search_cwd: bool = True,
    timed: bool = False,
    **extra: Any,
) -> gym.Env[Any, Any]:
    """The env with the user's wrappers, recreated whenever it raises (see a3c_ray.envs.faults), so
    that neither a Worker nor an evaluation dies with it; an eval episode cut by a failure ends there.
    With ``timed``, the bare env's steps count into ``emulator_seconds``."""

    def make() -> gym.Env[Any, Any]:
        env = _make_base(cfg, render_mode, search_cwd, **extra)
        return _wrap(atari.EmulatorClock(env) if timed else env, cfg.wrappers, search_cwd)

    return RecreateOnError(make)


def make_env(
    cfg: EnvConfig,
    training: bool = True,
    render_mode: str | None = None,
    search_cwd: bool = True,
) -> gym.Env[Any, Any]:
    """One environment; ``training`` adds Atari's life-loss ends and reward clipping.
    ``search_cwd``: a ``module:Name`` is looked for in the working directory too, as for an env
    the user names (``--env``); not for one a checkpoint names, even when trusted."""
    register_extra_envs()
    if is_atari(cfg.id):
        return _make_atari(cfg, training, render_mode, search_cwd)
    env = _base_env(cfg, render_mode, search_cwd)
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


def make_eval_env(
    cfg: EnvConfig, render_mode: str | None = None, search_cwd: bool = True
) -> gym.Env[Any, Any]:
    """One environment for evaluation: whole games, raw rewards."""
    return make_env(cfg, training=False, render_mode=render_mode, search_cwd=search_cwd)


def env_spaces(cfg: EnvConfig) -> tuple[gym.spaces.Box, gym.Space[Any]]:
    env = make_env(cfg, training=False)
    try:
        return env.observation_space, env.action_space  # type: ignore[return-value]
    finally:
        env.close()
