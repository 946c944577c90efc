"""Serving a trained policy over HTTP with Ray Serve: the application (``serving``), its options
(``serve_options``), requests and answers (``serve_protocol``), the ingress (``serve_ingress``),
the recurrent sessions (``sessions``), the replica's service (``serve_app``), following a run's
newest best checkpoint (``serve_follow``) and running it all from the command (``serve_run``).

It sits above ``runtime`` (it may import it and what lies below); ``runtime`` keeps what runs a
training and never imports it.
"""
