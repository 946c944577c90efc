"""n-step returns and GAE(lambda) against hand computations and a slow reference in paper notation.

The reference below walks each env and each step t forward, summing gamma^(i-t) r_i until the
episode ends (termination: tail 0; truncation: bootstrap gamma^(n) V(final_obs)) or the rollout
ends (bootstrap gamma^(T-t) V(s_T)), exactly as written in Mnih et al. 2016, Algorithm S3, and
Schulman et al. 2016, eq. 16. It shares no code with ``a3c_ray.algo.returns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from a3c_ray.algo.returns import Targets, gae, next_values, nstep_returns

GAMMA = 0.9


def assert_close(actual: Any, desired: Any) -> None:
    """float32 fast code against float64 references."""
    np.testing.assert_allclose(actual, desired, rtol=1e-5, atol=1e-5)


# -- the slow reference ---------------------------------------------------------------------


def ref_next_value(
    t: int,
    k: int,
    terminated: np.ndarray,
    truncated: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    last_values: np.ndarray,
) -> float:
    """V of the state transition (t, k) led to: 0 if terminal, V(final) if cut, else V(s_{t+1})."""
    if terminated[t, k]:
        return 0.0
    if truncated[t, k]:
        return float(final_values[t, k])
    if t == values.shape[0] - 1:
        return float(last_values[k])
    return float(values[t + 1, k])


def ref_nstep(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
) -> np.ndarray:
    """R_t = sum_{i=t}^{t+n-1} gamma^(i-t) r_i + gamma^n V(s_{t+n}), n as long as the episode allows."""
    T, K = rewards.shape
    out = np.zeros((T, K), dtype=np.float64)
    for k in range(K):
        for t in range(T):
            ret = 0.0
            for i in range(t, T):
                ret += gamma ** (i - t) * float(rewards[i, k])
                if terminated[i, k]:
                    break  # the terminal state is worth 0
                if truncated[i, k]:
                    ret += gamma ** (i - t + 1) * float(final_values[i, k])
                    break
                if i == T - 1:
                    ret += gamma ** (T - t) * float(last_values[k])
            out[t, k] = ret
    return out


def ref_gae(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """A_t = sum_l (gamma lambda)^l delta_{t+l}, summed up to and including the episode's last step."""
    T, K = rewards.shape
    delta = np.zeros((T, K), dtype=np.float64)
    for k in range(K):
        for t in range(T):
            nv = ref_next_value(t, k, terminated, truncated, values, final_values, last_values)
            delta[t, k] = float(rewards[t, k]) + gamma * nv - float(values[t, k])
    adv = np.zeros((T, K), dtype=np.float64)
    for k in range(K):
        for t in range(T):
            total = 0.0
            for i in range(t, T):
                total += (gamma * lam) ** (i - t) * delta[i, k]
                if terminated[i, k] or truncated[i, k]:
                    break
            adv[t, k] = total
    return adv


# -- rollouts -------------------------------------------------------------------------------


def rollout(
    rewards: list[list[float]],
    values: list[list[float]],
    last_values: list[float],
    terminated: Sequence[tuple[int, int]] = (),
    truncated: Sequence[tuple[int, int]] = (),
    final_values: dict[tuple[int, int], float] | None = None,
) -> dict[str, np.ndarray]:
    """A small [T, K] rollout as the Worker builds it: float32 numbers, bool flags."""
    r = np.asarray(rewards, dtype=np.float32)
    term = np.zeros(r.shape, dtype=bool)
    trunc = np.zeros(r.shape, dtype=bool)
    fv = np.zeros(r.shape, dtype=np.float32)
    for tk in terminated:
        term[tk] = True
    for tk in truncated:
        trunc[tk] = True
    for tk, v in (final_values or {}).items():
        fv[tk] = v
    return {
        "rewards": r,
        "terminated": term,
        "truncated": trunc,
        "values": np.asarray(values, dtype=np.float32),
        "final_values": fv,
        "last_values": np.asarray(last_values, dtype=np.float32),
    }


def random_rollout(seed: int, T: int = 9, K: int = 6, p_end: float = 0.2) -> dict[str, np.ndarray]:
    """Random rewards and values, episode ends at random places; final_values is noise everywhere,
    so a wrong read of it where nothing was truncated shows up."""
    rng = np.random.default_rng(seed)
    terminated = rng.random((T, K)) < p_end
    truncated = rng.random((T, K)) < p_end
    return {
        "rewards": rng.normal(size=(T, K)).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
        "values": rng.normal(size=(T, K)).astype(np.float32),
        "final_values": rng.normal(size=(T, K)).astype(np.float32) * 3,
        "last_values": rng.normal(size=K).astype(np.float32) * 3,
    }


# T=3, K=1, gamma=0.9: rewards 1, 2, 3; values 0.5, 0.6, 0.7; V(s_T) = 10; V(final) = 5.
BASE: dict[str, Any] = {
    "rewards": [[1.0], [2.0], [3.0]],
    "values": [[0.5], [0.6], [0.7]],
    "last_values": [10.0],
}


# -- n-step returns: hand computations ------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # no end: R2 = 3 + .9*10 = 12; R1 = 2 + .9*12 = 12.8; R0 = 1 + .9*12.8 = 12.52
        ({}, [12.52, 12.8, 12.0]),
        # terminated at t=1: R1 = 2 (s_2 is terminal); R0 = 1 + .9*2; R2 bootstraps from V(s_T)
        ({"terminated": [(1, 0)]}, [2.8, 2.0, 12.0]),
        # truncated at t=1 with V(final)=5: R1 = 2 + .9*5 = 6.5; R0 = 1 + .9*6.5
        ({"truncated": [(1, 0)], "final_values": {(1, 0): 5.0}}, [6.85, 6.5, 12.0]),
        # truncated at the last step: bootstrap from V(final)=5, not from V(s_T)=10
        ({"truncated": [(2, 0)], "final_values": {(2, 0): 5.0}}, [8.875, 8.75, 7.5]),
        # terminated at the last step: no bootstrap at all
        ({"terminated": [(2, 0)]}, [5.23, 4.7, 3.0]),
        # terminated at t=0: R0 is the reward alone
        ({"terminated": [(0, 0)]}, [1.0, 12.8, 12.0]),
        # both flags on one step: termination wins, the state is worth 0
        (
            {"terminated": [(1, 0)], "truncated": [(1, 0)], "final_values": {(1, 0): 5.0}},
            [2.8, 2.0, 12.0],
        ),
    ],
    ids=[
        "no-end",
        "terminated-mid",
        "truncated-mid",
        "truncated-last",
        "terminated-last",
        "terminated-first",
        "both-flags",
    ],
)
def test_nstep_returns_match_hand_computation(flags: dict, expected: list[float]) -> None:
    ro = rollout(**BASE, **flags)
    out = nstep_returns(**ro, gamma=GAMMA)
    assert isinstance(out, Targets)
    assert_close(out.returns[:, 0], expected)
    assert_close(out.advantages, out.returns - ro["values"])


def test_nstep_returns_several_envs_with_different_end_times() -> None:
    # env 0 terminates at t=0, env 1 is truncated at t=1 (V(final)=5), env 2 never ends
    ro = rollout(
        rewards=[[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0]],
        values=[[0.5] * 3, [0.6] * 3, [0.7] * 3],
        last_values=[10.0, 10.0, 10.0],
        terminated=[(0, 0)],
        truncated=[(1, 1)],
        final_values={(1, 1): 5.0},
    )
    out = nstep_returns(**ro, gamma=GAMMA)
    expected = np.array([[1.0, 6.85, 12.52], [12.8, 6.5, 12.8], [12.0, 12.0, 12.0]])
    assert_close(out.returns, expected)


def test_nstep_returns_bootstrap_each_env_from_its_own_last_value() -> None:
    ro = rollout(rewards=[[0.0, 0.0]], values=[[0.0, 0.0]], last_values=[1.0, -2.0])
    out = nstep_returns(**ro, gamma=0.5)
    assert_close(out.returns, [[0.5, -1.0]])


# -- GAE: hand computations -----------------------------------------------------------------


def test_gae_matches_hand_computation_without_episode_end() -> None:
    # deltas: d0 = 1 + .9*.6 - .5 = 1.04; d1 = 2 + .9*.7 - .6 = 2.03; d2 = 3 + .9*10 - .7 = 11.3
    # with gamma*lambda = .45: A2 = 11.3; A1 = 2.03 + .45*11.3 = 7.115; A0 = 1.04 + .45*7.115
    out = gae(**rollout(**BASE), gamma=GAMMA, lam=0.5)
    assert_close(out.advantages[:, 0], [4.24175, 7.115, 11.3])
    assert_close(out.returns[:, 0], [4.74175, 7.715, 12.0])


def test_gae_matches_hand_computation_with_termination() -> None:
    # terminated at t=1: d1 = 2 + 0 - .6 = 1.4 and A1 = d1 (nothing flows back from t=2)
    out = gae(**rollout(**BASE, terminated=[(1, 0)]), gamma=GAMMA, lam=0.5)
    assert_close(out.advantages[:, 0], [1.04 + 0.45 * 1.4, 1.4, 11.3])


def test_gae_matches_hand_computation_with_truncation() -> None:
    # truncated at t=1 with V(final)=5: d1 = 2 + .9*5 - .6 = 5.9 and A1 = d1
    ro = rollout(**BASE, truncated=[(1, 0)], final_values={(1, 0): 5.0})
    out = gae(**ro, gamma=GAMMA, lam=0.5)
    assert_close(out.advantages[:, 0], [1.04 + 0.45 * 5.9, 5.9, 11.3])


# -- next_values ----------------------------------------------------------------------------


def test_next_values_picks_the_right_successor_value() -> None:
    ro = rollout(
        rewards=[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
        values=[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
        last_values=[7.0, 8.0, 9.0],
        terminated=[(0, 0), (1, 1)],
        truncated=[(0, 1), (1, 2)],
        final_values={(0, 1): -1.0, (1, 2): -2.0, (0, 2): 99.0},  # (0, 2) is not truncated
    )
    nv = next_values(
        ro["values"], ro["terminated"], ro["truncated"], ro["final_values"], ro["last_values"]
    )
    assert_close(nv, [[0.0, -1.0, 6.0], [7.0, 0.0, -2.0]])


# -- against the slow reference on random rollouts ------------------------------------------


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nstep_returns_match_reference(gamma: float, seed: int) -> None:
    ro = random_rollout(seed)
    out = nstep_returns(**ro, gamma=gamma)
    assert_close(out.returns, ref_nstep(**ro, gamma=gamma))
    assert_close(out.advantages, out.returns - ro["values"])


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.95, 1.0])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_reference(gamma: float, lam: float, seed: int) -> None:
    ro = random_rollout(seed)
    out = gae(**ro, gamma=gamma, lam=lam)
    adv = ref_gae(**ro, gamma=gamma, lam=lam)
    assert_close(out.advantages, adv)
    assert_close(out.returns, adv + ro["values"])


@pytest.mark.parametrize("p_end", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("gamma", [0.5, 0.9, 0.99])
def test_gae_with_lambda_one_equals_nstep_returns(gamma: float, p_end: float) -> None:
    ro = random_rollout(7, p_end=p_end)
    g = gae(**ro, gamma=gamma, lam=1.0)
    n = nstep_returns(**ro, gamma=gamma)
    assert_close(g.returns, n.returns)
    assert_close(g.advantages, n.advantages)


@pytest.mark.parametrize("gamma", [0.5, 0.9, 0.99])
def test_gae_with_lambda_zero_gives_one_step_td_errors(gamma: float) -> None:
    ro = random_rollout(3)
    T, K = ro["rewards"].shape
    td = np.zeros((T, K))
    for k in range(K):
        for t in range(T):
            nv = ref_next_value(
                t,
                k,
                ro["terminated"],
                ro["truncated"],
                ro["values"],
                ro["final_values"],
                ro["last_values"],
            )
            td[t, k] = ro["rewards"][t, k] + gamma * nv - ro["values"][t, k]
    out = gae(**ro, gamma=gamma, lam=0.0)
    assert_close(out.advantages, td)


# -- nothing flows back across an episode's end ---------------------------------------------


@pytest.mark.parametrize("flag", ["terminated", "truncated"])
@pytest.mark.parametrize("lam", [0.5, 1.0])
def test_nothing_flows_back_across_an_episode_end(flag: str, lam: float) -> None:
    ro = random_rollout(11, T=8, K=3, p_end=0.0)
    ro[flag][3, 1] = True
    out_nstep = nstep_returns(**ro, gamma=0.99)
    out_gae = gae(**ro, gamma=0.99, lam=lam)

    # rewrite everything env 1 sees after its episode ended at t=3
    changed = {key: v.copy() for key, v in ro.items()}
    changed["rewards"][4:, 1] += 100.0
    changed["values"][4:, 1] -= 50.0
    changed["last_values"][1] += 1000.0
    changed["truncated"][6, 1] = True
    changed["final_values"][6, 1] += 7.0
    after_nstep = nstep_returns(**changed, gamma=0.99)
    after_gae = gae(**changed, gamma=0.99, lam=lam)

    for before, after in ((out_nstep, after_nstep), (out_gae, after_gae)):
        assert_close(after.returns[:4, 1], before.returns[:4, 1])
        assert_close(after.advantages[:4, 1], before.advantages[:4, 1])
        assert not np.allclose(after.returns[4:, 1], before.returns[4:, 1])
        # the other envs are untouched
        assert_close(after.returns[:, [0, 2]], before.returns[:, [0, 2]])


def test_truncation_bootstraps_from_final_value_not_next_step_value() -> None:
    ro = random_rollout(5, T=5, K=2, p_end=0.0)
    ro["truncated"][2, 0] = True
    base = nstep_returns(**ro, gamma=0.9).returns.copy()
    ro["final_values"][2, 0] += 10.0
    moved = nstep_returns(**ro, gamma=0.9).returns
    # R_t for t <= 2 moves by gamma^(3-t) * 10; later steps and the other env do not move
    assert_close(moved[:3, 0] - base[:3, 0], [0.9**3 * 10, 0.9**2 * 10, 0.9 * 10])
    assert_close(moved[3:, 0], base[3:, 0])
    assert_close(moved[:, 1], base[:, 1])


def test_termination_ignores_final_value_and_last_value() -> None:
    ro = rollout(**BASE, terminated=[(2, 0)], final_values={(2, 0): 123.0})
    out = nstep_returns(**ro, gamma=GAMMA)
    assert_close(out.returns[:, 0], [5.23, 4.7, 3.0])
