"""How torch's OpenMP threads wait between parallel regions, and what it costs on busy cores.

    python benchmarks/thread_wait.py --steps 15 --threads 2 --policies DEFAULT,PASSIVE

Each policy runs in its own process (``OMP_WAIT_POLICY`` is read when torch loads): the demo's model shape (one
encoder and one decoder layer, d_model 128, 8 heads, feed-forward 256; a batch of 64 × 32 tokens) takes ``--steps``
Adam steps after 3 warm-up steps.  A line per policy: wall and CPU seconds, the 1-minute load average before and
after.  ``DEFAULT``: the variable unset (libgomp spins a while, then sleeps); ``ACTIVE`` threads spin while they
wait.  On cores other processes also use, the partner a thread waits for may be descheduled and the spin burns the
time it waits for.  Importing attnlab sets ``PASSIVE`` unless the user set a policy (``attnlab/__init__.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

STEPS = """
import json, sys, time, torch
torch.manual_seed(0)
torch.set_num_threads({threads})
m = torch.nn.Transformer(d_model=128, nhead=8, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=256,
                         batch_first=True)
opt = torch.optim.Adam(m.parameters())
src, tgt = torch.randn(64, 32, 128), torch.randn(64, 32, 128)   # (B, n, d_model)
def step():
    m(src, tgt).sum().backward(); opt.step(); opt.zero_grad()
for _ in range(3):
    step()
t, c = time.perf_counter(), time.process_time()
for _ in range({steps}):
    step()
print(json.dumps({{"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - c, 2)}}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=15, help="timed training steps per policy")
    ap.add_argument("--threads", type=int, default=2, help="torch's intra-op threads")
    ap.add_argument("--policies", default="DEFAULT,PASSIVE",
                    help="OMP_WAIT_POLICY values, comma-separated (DEFAULT: unset)")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.threads < 1:
        ap.error("--steps and --threads must be >= 1")
    policies = [p.strip().upper() for p in a.policies.split(",") if p.strip()]
    if not policies or any(p not in ("DEFAULT", "ACTIVE", "PASSIVE") for p in policies):
        ap.error(f"--policies: DEFAULT, ACTIVE or PASSIVE, got {a.policies!r}")
    for policy in policies:
        before = os.getloadavg()[0]
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy != "DEFAULT":
            env["OMP_WAIT_POLICY"] = policy
        out = subprocess.run([sys.executable, "-c", STEPS.format(threads=a.threads, steps=a.steps)], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"thread_wait.py: error: the {policy} run failed: {out.stderr.strip().splitlines()[-1:]}",
                  file=sys.stderr)
            return 1
        row = {"policy": policy, "threads": a.threads, "steps": a.steps, **json.loads(out.stdout),
               "load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2)}
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)
