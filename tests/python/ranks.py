"""rqat tools run as torchrun-style data-parallel processes (RANK, WORLD_SIZE, MASTER_ADDR/PORT; Gloo on the
CPU), for the CLI tests."""

import os
import socket
import subprocess

import pytest

# The environment of one process: one thread each, and none of a launcher's variables.
SINGLE_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_NTASKS", "SLURM_PROCID"):
    SINGLE_ENV.pop(var, None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cmd, world, timeout_s=300):
    """Runs `cmd` as `world` processes (one plain process for 1); fails the test with the output of a rank that
    exits non-zero; returns rank 0's stdout."""
    cmd = [str(c) for c in cmd]
    if world == 1:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=SINGLE_ENV)
        if r.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r.stdout
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = {**SINGLE_ENV, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    try:
        outputs = [p.communicate(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:  # never leave a rank waiting for its peer
            if p.poll() is None:
                p.kill()
    for rank, (p, (out, err)) in enumerate(zip(procs, outputs)):
        if p.returncode != 0:
            pytest.fail(f"rank {rank} of {' '.join(cmd)} exited {p.returncode}\n--- stdout ---\n{out}\n"
                        f"--- stderr ---\n{err}")
    return outputs[0][0]
