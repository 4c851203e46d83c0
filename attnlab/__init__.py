"""attnlab: the mathematics and the structure of transformer attention."""

import os

__version__ = "0.1.0"

# torch's OpenMP threads sleep between parallel regions instead of spinning: set when attnlab is imported, so before
# torch loads in the command and the benchmarks; a value the user sets wins.  On cores other processes also use, a
# spinning thread waits for a descheduled partner: 15 training steps of the demo's model shape took 55.6 s wall by
# default (spinning) and 3.6 s passive on 2 cores at load 7-8 (benchmarks/thread_wait.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
