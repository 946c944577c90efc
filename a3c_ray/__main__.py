"""``python -m a3c_ray``: the ``a3c-ray`` command."""

import sys

from a3c_ray.commands.cli import main

sys.exit(main())
