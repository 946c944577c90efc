"""The actor-critic loss: each term by hand with numpy, and its gradients checked three ways.

For a flat batch of N samples, with p = softmax(z) and H_i = -sum_a p_ia log p_ia:
  d policy_loss / d z = -(onehot(a) - p) * A / N
  d value_loss  / d V = (V - R) / N
  d mean(H)     / d z = -p * (log p + H) / N
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from a3c_ray.algo.losses import LossOutput, actor_critic_loss

N, A = 5, 3


def batch(seed: int = 0, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "logits": torch.randn(N, A, generator=g, dtype=dtype) * 2,
        "values": torch.randn(N, generator=g, dtype=dtype),
        "actions": torch.randint(0, A, (N,), generator=g),
        "returns": torch.randn(N, generator=g, dtype=dtype),
        "advantages": torch.randn(N, generator=g, dtype=dtype),
    }


def np_log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# -- values ---------------------------------------------------------------------------------


def test_terms_match_a_hand_computation_on_a_tiny_batch() -> None:
    logits = np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]])
    values = np.array([0.3, -1.0])
    actions = np.array([1, 2])
    returns = np.array([1.0, 0.5])
    advantages = np.array([0.7, -2.0])

    logp = np_log_softmax(logits)
    p = np.exp(logp)
    policy = -np.mean(logp[np.arange(2), actions] * advantages)
    value = 0.5 * np.mean((returns - values) ** 2)
    entropy = np.mean(-(p * logp).sum(-1))
    # the uniform row has entropy log 3: the numpy side is right too
    assert -(p[1] * logp[1]).sum() == pytest.approx(np.log(3))

    out = actor_critic_loss(
        torch.tensor(logits),
        torch.tensor(values),
        torch.tensor(actions),
        torch.tensor(returns),
        torch.tensor(advantages),
        value_coef=0.5,
        entropy_coef=0.01,
    )
    assert isinstance(out, LossOutput)
    assert out.policy_loss.item() == pytest.approx(policy, rel=1e-12)
    assert out.value_loss.item() == pytest.approx(value, rel=1e-12)
    assert out.entropy.item() == pytest.approx(entropy, rel=1e-12)
    assert out.loss.item() == pytest.approx(policy + 0.5 * value - 0.01 * entropy, rel=1e-12)


@pytest.mark.parametrize(("value_coef", "entropy_coef"), [(0.5, 0.01), (1.0, 0.0), (0.25, 0.5)])
def test_loss_combines_terms_with_the_coefficients(value_coef: float, entropy_coef: float) -> None:
    out = actor_critic_loss(**batch(1), value_coef=value_coef, entropy_coef=entropy_coef)
    expected = out.policy_loss + value_coef * out.value_loss - entropy_coef * out.entropy
    torch.testing.assert_close(out.loss.detach(), expected)


def test_loss_is_a_scalar_and_reported_terms_are_detached() -> None:
    b = batch(2)
    b["logits"].requires_grad_(True)
    b["values"].requires_grad_(True)
    out = actor_critic_loss(**b, value_coef=0.5, entropy_coef=0.01)
    assert out.loss.shape == ()
    assert out.loss.requires_grad
    for term in (out.policy_loss, out.value_loss, out.entropy):
        assert term.shape == ()
        assert not term.requires_grad


def test_loss_stays_finite_for_extreme_logits() -> None:
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [-500.0, 500.0, 0.0]], requires_grad=True)
    out = actor_critic_loss(
        logits,
        torch.zeros(2),
        torch.tensor([0, 1]),
        torch.zeros(2),
        torch.ones(2),
        value_coef=0.5,
        entropy_coef=0.01,
    )
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert out.entropy.item() == pytest.approx(0.0, abs=1e-6)
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


# -- gradients ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "value_coef", "entropy_coef"), [(0, 0.5, 0.01), (1, 1.0, 0.0), (2, 0.0, 1.0)]
)
def test_gradcheck_on_logits_and_values(seed: int, value_coef: float, entropy_coef: float) -> None:
    b = batch(seed)

    def loss(logits: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return actor_critic_loss(
            logits,
            values,
            b["actions"],
            b["returns"],
            b["advantages"],
            value_coef=value_coef,
            entropy_coef=entropy_coef,
        ).loss

    inputs = (b["logits"].requires_grad_(True), b["values"].requires_grad_(True))
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-5)


def grads(
    b: dict[str, torch.Tensor], value_coef: float, entropy_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = b["logits"].clone().requires_grad_(True)
    values = b["values"].clone().requires_grad_(True)
    out = actor_critic_loss(
        logits,
        values,
        b["actions"],
        b["returns"],
        b["advantages"],
        value_coef=value_coef,
        entropy_coef=entropy_coef,
    )
    out.loss.backward()
    assert logits.grad is not None and values.grad is not None
    return logits.grad, values.grad


def analytic(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    p = torch.softmax(b["logits"], -1)
    logp = torch.log_softmax(b["logits"], -1)
    H = -(p * logp).sum(-1, keepdim=True)
    onehot = torch.nn.functional.one_hot(b["actions"], A).to(p.dtype)
    return {
        "policy": -(onehot - p) * b["advantages"][:, None] / N,
        "value": (b["values"] - b["returns"]) / N,
        "entropy": -p * (logp + H) / N,  # of mean(H); the loss subtracts it
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_gradient_matches_analytic(seed: int) -> None:
    b = batch(seed)
    g_logits, g_values = grads(b, value_coef=0.0, entropy_coef=0.0)
    torch.testing.assert_close(g_logits, analytic(b)["policy"])
    torch.testing.assert_close(g_values, torch.zeros_like(g_values))


@pytest.mark.parametrize("value_coef", [0.5, 1.0, 2.0])
def test_value_gradient_matches_analytic(value_coef: float) -> None:
    b = batch(3)
    b["advantages"] = torch.zeros_like(b["advantages"])  # switch the policy term off
    g_logits, g_values = grads(b, value_coef=value_coef, entropy_coef=0.0)
    torch.testing.assert_close(g_values, value_coef * analytic(b)["value"])
    torch.testing.assert_close(g_logits, torch.zeros_like(g_logits))


@pytest.mark.parametrize("entropy_coef", [0.01, 1.0])
def test_entropy_gradient_matches_analytic(entropy_coef: float) -> None:
    b = batch(4)
    b["advantages"] = torch.zeros_like(b["advantages"])
    g_logits, _ = grads(b, value_coef=0.0, entropy_coef=entropy_coef)
    torch.testing.assert_close(g_logits, -entropy_coef * analytic(b)["entropy"])


def test_entropy_gradient_is_zero_at_the_uniform_policy() -> None:
    b = batch(5)
    b["logits"] = torch.zeros(N, A, dtype=torch.float64)
    b["advantages"] = torch.zeros_like(b["advantages"])
    g_logits, _ = grads(b, value_coef=0.0, entropy_coef=1.0)
    torch.testing.assert_close(g_logits, torch.zeros_like(g_logits))


@pytest.mark.parametrize("seed", [0, 6])
def test_full_gradient_matches_analytic(seed: int) -> None:
    b = batch(seed)
    g_logits, g_values = grads(b, value_coef=0.5, entropy_coef=0.01)
    a = analytic(b)
    torch.testing.assert_close(g_logits, a["policy"] - 0.01 * a["entropy"])
    torch.testing.assert_close(g_values, 0.5 * a["value"])


def test_returns_and_advantages_receive_no_gradient() -> None:
    b = batch(7)
    logits = b["logits"].requires_grad_(True)
    values = b["values"].requires_grad_(True)
    returns = b["returns"].requires_grad_(True)
    advantages = b["advantages"].requires_grad_(True)
    out = actor_critic_loss(
        logits, values, b["actions"], returns, advantages, value_coef=0.5, entropy_coef=0.01
    )
    out.loss.backward()
    assert logits.grad is not None and values.grad is not None
    assert returns.grad is None
    assert advantages.grad is None


def test_advantages_computed_from_values_do_not_leak_gradient_into_values() -> None:
    # the Worker forms A = R - V from the same V it regresses; only the value loss may move V
    b = batch(8)
    values = b["values"].clone().requires_grad_(True)
    advantages = b["returns"] - values  # carries a graph back to values
    logits = b["logits"].clone().requires_grad_(True)
    out = actor_critic_loss(
        logits, values, b["actions"], b["returns"], advantages, value_coef=1.0, entropy_coef=0.0
    )
    out.loss.backward()
    assert values.grad is not None
    torch.testing.assert_close(values.grad, (values - b["returns"]).detach() / N)


def test_actions_may_be_any_integer_dtype() -> None:
    b = batch(9)
    ref = actor_critic_loss(**b, value_coef=0.5, entropy_coef=0.01).loss
    b["actions"] = b["actions"].to(torch.int32)
    torch.testing.assert_close(actor_critic_loss(**b, value_coef=0.5, entropy_coef=0.01).loss, ref)


# -- the Huber value loss -------------------------------------------------------------------


def test_huber_value_loss_matches_the_squared_error_near_and_grows_linearly_far() -> None:
    values = torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)
    returns = torch.tensor([0.5, -0.8, 3.0, -100.0], dtype=torch.float64)
    common = {
        "logits": torch.zeros(4, 2, dtype=torch.float64),
        "actions": torch.zeros(4, dtype=torch.long),
        "advantages": torch.zeros(4, dtype=torch.float64),
        "value_coef": 1.0,
        "entropy_coef": 0.0,
    }
    out = actor_critic_loss(values=values, returns=returns, value_loss="huber", **common)
    # 0.5 e^2 for |e| <= 1, |e| - 0.5 beyond, by hand
    assert out.value_loss.item() == pytest.approx((0.125 + 0.32 + 2.5 + 99.5) / 4, rel=1e-12)
    out.loss.backward()
    assert values.grad is not None
    # the gradient is the error where it is small and its sign (at most 1) where it is not
    torch.testing.assert_close(values.grad, torch.tensor([-0.5, 0.8, -1.0, 1.0]).double() / 4)
    # within the bend both losses agree exactly
    near = {"values": values.detach()[:2], "returns": returns[:2]}
    cut = {k: v[:2] for k, v in common.items() if isinstance(v, torch.Tensor)}
    mse = actor_critic_loss(**near, **cut, value_coef=1.0, entropy_coef=0.0, value_loss="mse")
    huber = actor_critic_loss(**near, **cut, value_coef=1.0, entropy_coef=0.0, value_loss="huber")
    assert huber.value_loss.item() == pytest.approx(mse.value_loss.item(), rel=1e-12)


def test_an_unknown_value_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown value loss 'l1'"):
        actor_critic_loss(**batch(3), value_coef=0.5, entropy_coef=0.01, value_loss="l1")
