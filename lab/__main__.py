"""``python -m lab MEASURE ...`` from the checkout's root (``lab.cli``)."""

import sys

from lab.cli import main

sys.exit(main())
