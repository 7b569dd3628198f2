"""Kernel start-up: the time from starting the kernel's process to its kernel_info_reply, for
brain's kernel and IPython's (ipykernel), measured the same way in one run.

    python benches/kernel_startup.py BRAIN_BINARY [runs]

The client's shell socket is connected before the kernel starts and retries every millisecond
(zmq's default is 100 ms, which would round every figure up to it), so the figure is the
kernel's own start-up: process start, bindings, and the first reply.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import zmq
from jupyter_client.connect import write_connection_file
from jupyter_client.session import Session


def time_to_reply(argv_for):
    with tempfile.TemporaryDirectory() as d:
        path, info = write_connection_file(os.path.join(d, "k.json"))
        session = Session(key=info["key"].encode() if isinstance(info["key"], str) else info["key"])
        ctx = zmq.Context()
        shell = ctx.socket(zmq.DEALER)
        shell.setsockopt(zmq.RECONNECT_IVL, 1)
        shell.setsockopt(zmq.LINGER, 0)
        shell.connect(f"tcp://{info['ip']}:{info['shell_port']}")
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv_for(path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        session.send(shell, "kernel_info_request", {})
        if shell.poll(30000) == 0:
            raise RuntimeError("no kernel_info_reply in 30 s")
        _, msg = session.recv(shell)
        took = time.perf_counter() - t0
        assert msg["msg_type"] == "kernel_info_reply", msg["msg_type"]
        proc.kill()
        proc.wait()
        shell.close()
        ctx.term()
        return took


def main():
    brain = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    kernels = {
        "brain": lambda f: [brain, "kernel", "-f", f, "--device", "cpu"],
        "ipykernel": lambda f: [sys.executable, "-m", "ipykernel_launcher", "-f", f],
    }
    for name, argv_for in kernels.items():
        times = [time_to_reply(argv_for) for _ in range(runs)]
        print(f"{name:10s} start-up to kernel_info_reply: median {statistics.median(times) * 1000:7.1f} ms,"
              f" min {min(times) * 1000:7.1f} ms over {runs} runs")


if __name__ == "__main__":
    main()
