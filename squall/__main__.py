import sys

from squall.ops.cli import main

sys.exit(main())
