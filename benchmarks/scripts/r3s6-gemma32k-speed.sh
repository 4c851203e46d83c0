#!/bin/bash
# session 6: Gemma-3-270M at 32K on session 6's code (kernel at any stride, wide bands' prefix as SDPA, AVX-512 loops) —
# session 5's run (r3s5-gemma32k-speed.sh: session 4's calibration, plan / SDPA / plan, 2 threads) into runs/r6
OUT=${OUT:-runs/r6/gemma32k-speed} exec bash "$(dirname "$0")/r3s5-gemma32k-speed.sh"
