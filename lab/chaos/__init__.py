"""The chaos soak: ``soak`` runs it on a local cluster, ``plan`` holds its schedule and records
(without Ray), ``checkpoints`` watches the run's checkpoints, ``probe`` reads the live cluster
(worker hosts, actor memory), ``report`` makes its figures, and ``command`` its flags and files."""
