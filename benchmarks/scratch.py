"""Where a benchmark keeps its harness files (inputs, state it does not measure, what its spouts record).

``SHM`` is ``/dev/shm`` when the machine has it (tmpfs: an open/write/close costs about 25 µs there,
about 1 ms on this project's disks), else ``None``, which ``tempfile`` reads as the system's
temporary directory. A benchmark that measures the disk itself passes its own directory instead.
"""

import os

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
