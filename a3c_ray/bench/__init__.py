"""What ``a3c-ray bench`` measures, between the commands and the runtime.

- ``throughput``: env steps/s of real runs on Ray, and where a Worker's time goes (``--profile``);
- ``ps_server``: the ParameterServer alone, its shards and the wire (``--ps-scale``);
- ``atari``: the emulator, the preprocessing and the networks of an Atari Worker, each alone;
- ``serving``: the Serve application under HTTP clients (``--serve``);
- ``chaos``: a run on a local cluster while its actors and nodes are killed (``--chaos``), and
  ``chaos_report``, the figures of its record;
- ``stability_score``: whether a seed learned and kept its target (``--stability``), and
  ``report``, the tables printed;
- ``plot``: learning curves of finished runs (``--plot-runs``).

The command (``a3c_ray.commands.bench``) only parses flags and prints.
"""
