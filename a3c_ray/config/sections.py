"""The sections of a run's settings: one dataclass per concern, one docstring per field
(docs/configuration.md's reference table is read from them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"
    """A registered gymnasium environment id, e.g. ``CartPole-v1`` or ``ALE/Pong-v5``."""
    num_envs: int = 8
    """Environments per Worker, stepped together as one gymnasium vector env (K)."""
    max_episode_steps: int | None = None
    """Override of the env's own time limit; episodes cut by it are truncated, not terminated. For Atari it counts agent steps of 4 frames; null there is 27,000 agent steps (108,000 frames, 30 minutes of play), so that no game, in training or evaluation, outlasts a policy that stalls."""
    decorrelate_steps: int | None = None
    """Before a Worker trains on weights that have trained (on resume and after a restart; not at a run's start, where an untrained policy's episodes differ in length anyway), it plays this many steps on the newest weights without training and resets its env i of K at step ``(K - i) / K`` of them, so its envs start i/K of the way into an episode instead of all at step 0; then it pulls the newest weights again, so that its first gradient is not as stale as the spread is long. null: the episode's time limit where it is 1,000 steps or less (CartPole's 500), else 0 (Atari, whose episodes differ in length anyway); 0 turns it off. Where every episode lasts the time limit, as a solved CartPole's do, envs reset together stay in step forever, and a Worker restarted beside a trained one sent bursts of failed episodes (docs/reliability.md)."""
    frame_stack: int | None = None
    """Observations stacked into one, oldest first. null: 4 for Atari (the papers' input to the feed-forward CNN), none for other envs. With ``model.lstm`` on Atari, 1 is enough: the LSTM state carries the motion."""
    screen_size: int = 84
    """Atari: the side of the square grayscale frame the screen is resized to (84, the papers'; 42, the input of the A3C references that learn Pong in minutes, a quarter of the pixels)."""
    max_pool: bool = True
    """Atari: skip frames in the preprocessing and take the maximum of the last two of each 4 (the papers', for games whose sprites flicker); false: the emulator skips the frames itself and the last one is seen (``PongDeterministic-v4``'s way), about a third less CPU per agent step."""
    fire_reset: bool | None = None
    """Atari: press FIRE at the start of every game and after every life lost, in training and evaluation alike, for games that wait for it to serve the ball or start a round (Breakout). null: on for games whose action meanings include FIRE, except those that start on their own (Pong); false: the policy has to learn to press it."""
    repeat_action_probability: float | None = None
    """Atari sticky actions: the chance that the emulator repeats the previous action at each frame instead of the new one. null keeps the id's default: 0.25 for ``ALE/*-v5``, 0 for ``*NoFrameskip-v4``; 0 is the deterministic emulator of the A3C paper."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env's constructor (or of ``gym.make``), e.g. ``--set env.kwargs.size=8``."""
    wrappers: list[str] = field(default_factory=list)
    """Wrappers of your own, applied in order around the env in Workers, the Monitor and ``eval``: import paths ``package.module:WrapperClass``, each called with the env."""


@dataclass
class ModelConfig:
    kind: str = "auto"
    """Network body: ``mlp``; ``cnn``, the A3C paper's (16 8x8/4, 32 4x4/2 convolutions, 256 units); ``nature_cnn`` (32 8x8/4, 64 4x4/2, 64 3x3/1, 512 units); ``small_cnn`` (four 32 3x3/2 convolutions with ELU, 256 units: the A3C references' network for 42x42 frames); ``auto``: ``cnn`` for image observations [C, H, W], else ``mlp``."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """Widths of the MLP's hidden layers (the CNNs have their papers' fixed sizes)."""
    activation: str = "tanh"
    """Activation of the MLP's hidden layers: ``tanh``, ``relu`` or ``elu``."""
    lstm: bool = False
    """Put an LSTM cell between the body and the heads (the paper's A3C LSTM), for any body. Its state is carried across rollouts per env and zeroed at each episode start."""
    lstm_size: int = 256
    """Hidden size of the LSTM cell."""
    policy: str = "auto"
    """The policy's distribution: ``categorical`` over Discrete actions; ``gaussian``, a diagonal
    Gaussian over Box actions (mean from the network, a learned state-independent log std, samples
    clipped to the action bounds in the env); ``auto``: the one the env's action space takes."""
    scale_actions: bool = True
    """Gaussian policy: fit it to the action Box, its mean starting at the Box's centre and its standard deviation in units of the Box's half-width, so that a policy starts with the same spread relative to the bounds on any Box (the weights learn as they would on a Box of [-1, 1]); false: the mean starts at 0 and the std is in the env's units (how checkpoints from before this setting act). Samples are clipped to the bounds where the env steps."""
    log_std_init: float = 0.0
    """Gaussian policy: the learned log standard deviation at the start (0: std 1, one half-width of the Box with ``scale_actions``). It is held within [-5, 2] throughout."""
    critic: str = "shared"
    """The value's body: ``shared`` with the policy (one body, two heads, the A3C paper's) or ``separate`` (an MLP of the same shape of its own; feed-forward MLPs only). Separate, the value's regression never moves the policy's features, but the policy then learns on its own gradient alone, which at the defaults' step size makes it deterministic too soon (docs/benchmarks.md)."""


@dataclass
class AlgoConfig:
    t_max: int = 3
    """Rollout length n: steps per environment between two gradient pushes."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE(lambda); 1.0 gives the paper's plain n-step advantage R_t - V(s_t). 0.95 weighs the value's own estimates more than the returns' tails: a solved CartPole's rare failure moves the policy less, and 16 of 16 seeds held 300 after first reaching 450 over 2M env steps, where the n-step advantage let 3 of 16 fall below it, as fast to 450 (docs/benchmarks.md)."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (beta in the paper)."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    value_loss: str = "mse"
    """The value's regression: ``mse``, 0.5 x the squared error of V(s_t) against its target, or ``huber``, the same for errors up to 1 and growing linearly beyond, so that one far-off target (a solved task's rare failure) pulls the weights by at most the value weight per step. On CartPole it is much worse: its returns reach 100, and the value, learning them at a bounded rate, took 305k-1,557k env steps to 450 where ``mse`` takes 86k-138k, and 6 of 6 seeds fell below 300 after (docs/benchmarks.md)."""
    max_grad_norm: float | None = 2.0
    """Clip each pushed gradient to this global L2 norm on the ParameterServer; null disables. With RMSProp's epsilon 0.1 the step grows with the gradient, so a clip that binds bounds it: a solved CartPole that fails again sends value errors near 100 and gradient norms of 60 to over 1,000, which the clip of 2 keeps from rewriting the policy (docs/benchmarks.md). Adam's step does not grow with the gradient, so there a clip changes little."""
    normalize_advantages: bool = False
    """Standardise advantages within each rollout before the policy loss."""
    bound_coef: float = 0.0
    """Gaussian policy: weight of a penalty on a mean outside the action Box, 0.5 x (its distance past the bound, in half-widths)^2 per dimension; nothing inside the Box. A mean far past a bound makes nearly every sample clip to the same action, so the advantage no longer tells the policy anything there and the mean can stay stuck; the penalty pulls it back to where sampling explores. 0: none."""
    optimizer: str = "rmsprop"
    """``rmsprop`` (statistics shared by all Workers, the paper's best variant) or ``adam``."""
    lr: float = 7e-3
    """Learning rate at the start of training."""
    lr_anneal: bool = False
    """Anneal the learning rate linearly to 0 over ``run.max_steps`` env steps."""
    lr_half_life: float | None = None
    """Halve the learning rate every this many env steps (``lr x 0.5 ** (env_steps / lr_half_life)``); null holds it. The decay follows the env steps, not ``run.max_steps``: a run resumed with a larger budget goes on at the step size it stopped at."""
    rmsprop_alpha: float = 0.99
    """RMSProp decay of the squared-gradient average."""
    optimizer_eps: float = 0.1
    """Epsilon of the optimizer's denominator, added outside the square root (torch's form). 0.1, the paper's: where the RMS gradient is below it, the step shrinks with the gradient, so a solved task's near-zero gradients barely move the weights. Adam or RMSProp with a tiny epsilon normalize every step to about ``lr``, and a solved CartPole drifts until it collapses."""
    max_staleness: int | None = None
    """Drop gradients computed from weights older than this many versions; null keeps all."""
    compute_dtype: str = "float32"
    """What a Worker's forward and backward passes compute in: ``float32``, ``bfloat16`` under torch's CPU autocast (convolutions and matrix products in bfloat16, the weights, their gradients and everything the ParameterServer holds in float32), or ``auto``: bfloat16 on a node whose CPU has avx512_bf16 or AMX, float32 elsewhere. With avx512_bf16 (docs/atari.md) it takes the paper's CNN's forward and backward to 0.65-0.71 of float32's time and a Pong run to 1.16x the agent steps per second; without those instructions it is several times slower. Evaluation always runs in float32."""
    overlap_push: bool = True
    """Start the next rollout while a pushed gradient travels, and take the reply's weights one rollout later: the round trip hides behind the rollout, at one more version of staleness per Worker."""


@dataclass
class RunConfig:
    workers: int | None = None
    """Number of Worker actors; null gives one per CPU of the cluster."""
    max_steps: int = 1_000_000
    """Stop after this many env steps, summed over all Workers."""
    target_return: float | None = None
    """Stop once the mean return of the last 100 training episodes reaches this (or an evaluation does, with ``run.target_from: eval``); null never."""
    target_from: str = "train"
    """What ``target_return`` is compared with: ``train``, the mean undiscounted return of the last 100 training episodes of all Workers; ``eval``, each of the Monitor's evaluations (the mean of ``monitor.eval_episodes`` whole episodes), so that a run stops at the first evaluation that reaches it."""
    time_limit: float | None = None
    """Stop after this many seconds of training (from the first gradient applied); null never."""
    seed: int = 0
    """Root seed; every Worker's and the Monitor's seeds derive from it deterministically."""
    run_dir: str | None = None
    """Where config, checkpoints, TensorBoard events and summary.json go; default runs/<env>-<time>."""
    worker_cpus: float = 1.0
    """Logical CPUs each Worker asks Ray for."""
    ps_cpus: float = 0.5
    """Logical CPUs the ParameterServer asks for (a fraction, so it never starves Workers)."""
    monitor_cpus: float = 0.5
    """Logical CPUs the Monitor asks for."""
    ps_resource: str | None = None
    """Custom Ray resource (e.g. ``a3c_ps``) whose node hosts the ParameterServer and the Monitor; null: the head node."""
    progress: bool = True
    """Show a live progress bar on the terminal."""
    max_worker_restarts: int = 10
    """Restarts allowed per Worker slot in a row, of Workers that failed before they trained; one more such failure stops the run with an error (see ``healthy_after``)."""
    restart_backoff: float = 1.0
    """Seconds before restarting a failed Worker, doubled for each further failure of that slot."""
    healthy_after: float = 60.0
    """A Worker that ran this many seconds, or trained (pushed env steps to the ParameterServer), before it failed has its slot's earlier failures forgotten: its replacement waits restart_backoff again, and max_worker_restarts counts afresh. A long run so survives Workers lost at any rate (nodes drained or preempted, processes killed); a Worker that cannot run at all still stops it."""
    stop_grace: float = 15.0
    """Seconds a stopping run (target, a limit, Ctrl-C, SIGTERM) waits for its Workers' last pushes. A Worker that has not started by then (no free CPU for it) is not waited for at all, and one still busy after it (stuck in its env) is killed: a run ends within this bound plus its final checkpoint."""
    actor_env: dict[str, str] = field(
        default_factory=lambda: {
            "MALLOC_ARENA_MAX": "2",
            "MALLOC_MMAP_THRESHOLD_": "33554432",
            "MALLOC_TRIM_THRESHOLD_": "134217728",
        }
    )
    """Environment variables of the run's Worker, ParameterServer and Monitor processes (Ray's ``runtime_env`` ``env_vars``, merged with the job's). The default caps glibc's malloc at 2 arenas, so that the megabytes of an Atari CNN's gradients, weights and batches freed in one thread's arena are reused by the next (an actor runs 25 to 60 threads; without the cap Pong's actors grew 9-20% in an hour, docs/reliability.md), and keeps blocks of up to 32 MiB, and up to 128 MiB of free heap, in the process: a block mapped from the system for each allocation and returned at each free costs its pages' faults every time, which doubled the CPU time of the Nature CNN's gradient pass on 80 frame stacks. ``{}`` leaves the processes' environment as Ray starts them."""


@dataclass
class MonitorConfig:
    eval_every: float = 5.0
    """Seconds between evaluations (each one also writes a checkpoint)."""
    eval_episodes: int = 5
    """Episodes per evaluation."""
    greedy: bool = False
    """Evaluate with the most likely action instead of a sampled one."""
    keep_checkpoints: int = 3
    """Keep this many most recent checkpoints, plus the best by eval return."""
    log_every: float = 1.0
    """Seconds between TensorBoard writes of the training charts."""
    video_every: int = 0
    """Record one eval episode to TensorBoard as a video every Nth evaluation; 0 never."""


@dataclass
class PSConfig:
    shards: int = 1
    """ParameterServer actors, each owning one contiguous slice of the weights and the optimizer
    statistics of that slice; placed on distinct nodes when the cluster has several."""
    wire_dtype: str = "float32"
    """How gradients and weights travel between Workers and the ParameterServer: float32,
    bfloat16 or float16 (the server keeps float32 weights and optimizer statistics)."""
    graph_workers: int = 4
    """Workers on a shard's node that push to it through a Ray compiled graph (shared-memory
    channels, no per-call scheduling) instead of an actor call; each costs the shard a thread
    that polls its channel all the time. The others, and Workers on other nodes, push by actor
    calls. 0: actor calls only."""


@dataclass
class TuneConfig:
    space: dict[str, str] = field(default_factory=dict)
    """What ``a3c-ray tune`` searches: config field -> sampler, e.g. ``algo.lr: loguniform(1e-4,
    1e-2)``; samplers are uniform, loguniform, quniform, randint, choice and grid (every value,
    each in num_samples trials). ``train`` ignores this section."""
    num_samples: int = 4
    """Trials to run (with grid entries: samples of every grid point)."""
    scheduler: str = "fifo"
    """fifo (every trial to its end), asha (stop the poor ones early) or pbt (population-based
    training: poor trials continue from a good one's checkpoint with perturbed values)."""
    metric: str = "mean_return_100"
    """What the search maximizes: mean_return_100 (last 100 training episodes) or eval_return
    (the Monitor's newest evaluation)."""
    report_every: float = 5.0
    """Seconds of training between a trial's reports to Tune."""
    grace_steps: int = 50_000
    """asha: env steps every trial gets before it may be stopped."""
    reduction_factor: int = 3
    """asha: at each rung, the best 1/reduction_factor of the trials go on."""
    perturbation_steps: int = 50_000
    """pbt: env steps between a trial's exploit-and-explore decisions."""
    quantile_fraction: float = 0.25
    """pbt: the bottom fraction of trials continues from the top fraction's checkpoints."""
    max_concurrent_trials: int | None = None
    """Trials running at once; null: as many as the cluster's CPUs hold."""
