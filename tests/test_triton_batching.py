"""What the gateway relies on in Triton's dynamic batcher: it sends FT's optional inputs
(repetition_penalty, min_length, bad and stop words, log probabilities) only when a request sets
them, and fastertransformer_backend reads a batch's inputs from its first request alone
(libfastertransformer.cc: "use any request as the representative for the input tensors"). So a
batch must never mix requests with different sets of inputs. Checked against a real tritonserver
(the nvidia-pytriton wheel's): a Python model with dynamic batching and an optional input counts,
per execution, its requests and those that carry the optional input."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest
from tritonlocal import tritonserver

pytest.importorskip("pytriton")
grpcclient = pytest.importorskip("tritonclient.grpc")

CONFIG = """name: "mixed"
backend: "python"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 500000 }
input [
  { name: "x" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "extra" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [ { name: "seen" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        carrying = sum(pb_utils.get_input_tensor_by_name(r, "extra") is not None for r in requests)
        seen = np.array([[len(requests), carrying]], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("seen", seen)]) for _ in requests]
"""


def test_the_dynamic_batcher_never_mixes_requests_with_and_without_an_optional_input(tmp_path):
    repo = tmp_path / "repo"
    (repo / "mixed" / "1").mkdir(parents=True)
    (repo / "mixed" / "config.pbtxt").write_text(CONFIG)
    (repo / "mixed" / "1" / "model.py").write_text(MODEL)
    requests, start = 8, threading.Barrier(8)
    with tritonserver(repo, tmp_path) as server:

        def ask(i: int) -> tuple[bool, list[int]]:
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
            x = grpcclient.InferInput("x", [1, 1], "INT32")
            x.set_data_from_numpy(np.array([[i]], dtype=np.int32))
            inputs, carries = [x], bool(i % 2)
            if carries:
                extra = grpcclient.InferInput("extra", [1, 1], "INT32")
                extra.set_data_from_numpy(np.array([[i]], dtype=np.int32))
                inputs.append(extra)
            start.wait()  # all at once, within the batcher's 0.5 s window
            return carries, client.infer("mixed", inputs).as_numpy("seen").reshape(-1).tolist()

        with concurrent.futures.ThreadPoolExecutor(requests) as pool:
            seen = list(pool.map(ask, range(requests)))
    print(f"(carries the optional input, [requests in its execution, of which carry it]): {seen}")
    # Batching happened (else the check below would hold trivially) ...
    assert max(size for _, (size, _) in seen) > 1, seen
    # ... and every execution held requests of one kind only.
    for carries, (size, carrying) in seen:
        assert carrying == (size if carries else 0), seen
