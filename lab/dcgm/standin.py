"""The lab's stand-in for NVIDIA's DCGM exporter (whose image and GPUs are out of reach here).

Serves GET /metrics on port 9400 as dcgm-exporter does: the metrics of a file in its exposition
format (h100.prom), for the GPUs this host has (--gpus 0,1) and with this host's Hostname. Run
by the dcgm_exporter role in the lab (inventories/lab/group_vars/gpu_hosts/dcgm_exporter.yml)
in the lab's serving image, which has python3.
"""

from __future__ import annotations

import argparse
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def exposition(text: str, gpus: set[str], hostname: str) -> bytes:
    """The file's HELP/TYPE lines and the samples of the given GPUs, with Hostname set."""
    kept = []
    for line in text.splitlines():
        if line.startswith("# HELP") or line.startswith("# TYPE"):
            kept.append(line)
        elif line and not line.startswith("#"):
            gpu = re.search(r'\bgpu="([^"]*)"', line)
            if gpu and gpu.group(1) in gpus:
                kept.append(re.sub(r'Hostname="[^"]*"', f'Hostname="{hostname}"', line))
    return ("\n".join(kept) + "\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", required=True, help="a file in dcgm-exporter's exposition format")
    parser.add_argument("--gpus", required=True, help="the host's GPU indexes, comma-separated")
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--port", type=int, default=9400)
    args = parser.parse_args()
    with open(args.metrics, encoding="utf-8") as f:
        body = exposition(f.read(), set(args.gpus.split(",")), args.hostname)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
