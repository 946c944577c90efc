"""The run directory: its layout, storage, checkpoints and the Monitor's files."""
