"""What ``a3c-ray bench`` measures, between the commands and the runtime: what a user of the
package measures of their own machine, cluster and config.

- ``measure``: one measure of a config (the raw limit, the ParameterServer, training runs), as
  medians of repeats, or where an agent step's time goes (``bench profile``);
- ``throughput``: env steps/s of real runs on Ray, and a Worker's time split;
- ``ps_server``: the ParameterServer alone, its shards and the wire (the throughput measure's
  ParameterServer figures);
- ``atari``: the emulator, the preprocessing and the networks of an Atari Worker, each alone;
- ``serving``: the Serve application under HTTP clients (``bench serve``);
- ``stability_score``: whether a seed learned and kept its target (``bench seeds``), and
  ``report``, the tables printed;
- ``plot``: learning curves of finished runs (``a3c-ray plot``).

The command (``a3c_ray.commands.bench``) only parses flags and prints. The project's own lab
(chaos soaks, ParameterServer shard sweeps, the stability table of finished runs) is the
checkout's ``lab`` package, which imports this one and is not installed with it.
"""
