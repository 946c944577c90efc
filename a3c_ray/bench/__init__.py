"""What ``a3c-ray bench`` measures, between the commands and the runtime.

- ``measure``: one measure of a config (the raw limit, the ParameterServer, training runs), as
  medians of repeats, or where an agent step's time goes (``bench profile``);
- ``throughput``: env steps/s of real runs on Ray, and a Worker's time split;
- ``ps_server``: the ParameterServer alone, its shards and the wire (``bench ps``);
- ``atari``: the emulator, the preprocessing and the networks of an Atari Worker, each alone;
- ``serving``: the Serve application under HTTP clients (``bench serve``);
- ``chaos``: a run on a local cluster while its actors and nodes are killed (``bench chaos``), and
  ``chaos_report``, the figures of its record;
- ``stability_score``: whether a seed learned and kept its target (``--stability``), and
  ``report``, the tables printed;
- ``plot``: learning curves of finished runs (``a3c-ray plot``).

The command (``a3c_ray.commands.bench``) only parses flags and prints.
"""
