#!/bin/bash
# The thesis experiment as `make demo` runs it (the synthetic English→Italian grammar, the 1-head and the 8-head
# model, 800 training steps each, the same models on any machine): its wall and CPU time and how busy the machine was
# (the mean 1-minute load average, sampled every 10 s), the BLEU each model reaches, the heads the roles stage names
# and whether the per-language ŵ recovers the grammar's reordering distance (benchmarks/demo_record.py: a line per
# model, then one for the run).  torch takes both cores, as under `make demo`.
cd "$(dirname "$0")/../.."   # the repository root
OUT=${RUNS:-runs}/demo
mkdir -p $OUT
.venv/bin/python - "${RUNS:-runs}/demo-run" > $OUT/measured.txt <<'PY'
import os, resource, subprocess, sys, threading, time

loads, done = [], threading.Event()


def sample():                      # the 1-minute load average every 10 s while the demo runs
    while not done.wait(10):
        loads.append(os.getloadavg()[0])


threading.Thread(target=sample, daemon=True).start()
start = time.time()
rc = subprocess.call([".venv/bin/attnlab", "experiment", "--out", sys.argv[1], "--force"], stdout=sys.stderr)
done.set()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{time.time() - start:.1f} {ru.ru_utime + ru.ru_stime:.1f} {sum(loads) / max(len(loads), 1):.2f} {rc}")
PY
read wall cpu load rc < $OUT/measured.txt
[ "$rc" = 0 ] || { echo "demo.sh: attnlab experiment failed (exit $rc)" >&2; exit 1; }
.venv/bin/python benchmarks/demo_record.py ${RUNS:-runs}/demo-run --wall $wall --cpu $cpu --load $load > $OUT/demo.jsonl
cat $OUT/demo.jsonl
