import sys

from a3c_ray.cli import main

sys.exit(main())
