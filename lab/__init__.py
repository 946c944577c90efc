"""The project's own lab: measurements of a3c-ray itself that a user of the installed package does
not need, run from a source checkout as ``python -m lab MEASURE`` (``lab.cli``).

- ``chaos``: the chaos soak on a cluster of the checkout's ``cluster/local.sh``
  (``local_cluster``), its plan, record, figures and probes of the live cluster;
- ``ps``: ParameterServer shard-count, wire and transport sweeps;
- ``stability``: the stability scoring of finished runs, such as the shipped configs' seeds.

The lab imports ``a3c_ray``; ``a3c_ray`` never imports the lab (``make lint``), and the package's
install leaves it out.
"""
