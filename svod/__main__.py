import sys

from svod.cli import main

sys.exit(main())
