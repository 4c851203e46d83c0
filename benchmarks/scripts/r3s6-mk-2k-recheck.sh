#!/bin/bash
# session 6: session 4's 2K multi-key test rerun from scratch on session 6's code (kernel at any stride, AVX-512 loops,
# last_query_mass, wide bands' prefix) — session 5's recheck (r3s5-mk-2k-recheck.sh: fresh folder, calibration remade)
# into runs/r6: does a new summation order move any greedy answer?
OUT=${OUT:-runs/r6/smol-2k-mk-recheck} exec bash "$(dirname "$0")/r3s5-mk-2k-recheck.sh"
