import sys

from a3c_ray.commands.cli import main

sys.exit(main())
