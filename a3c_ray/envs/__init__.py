"""Making environments: gymnasium ids, Atari preprocessing, masked CartPole, fault wrappers."""
