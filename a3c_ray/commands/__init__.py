"""The ``a3c-ray`` subcommands: each parses its flags and maps outcomes to exit codes."""
