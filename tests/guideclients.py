#!/usr/bin/env python3
"""The guides' clients' requests, their exact tensors, sent to one tritonserver over HTTP and gRPC
(tritonclient, as the clients use it); prints one JSON object of what came back.

- fastertransformer_backend's tools/gpt/end_to_end_test.py and identity_test.py (the GPT-NeoX
  guide runs them): every input of the fastertransformer model as [batch, 1] scalars, empty bad
  and stop word lists as [batch, 2, 1] (ids 0, offsets -1), greedy (top_k 1), len_penalty 1.0,
  log probabilities asked for; with --beam, identity_test's beam search (beam_width N).
- the KoGPT guide's HTTP client and the tutorial's gRPC client: the ensemble's INPUT_0..3 with
  the sampling inputs they set.

These are unary requests (`infer`), which a decoupled model refuses (HTTP 501; gRPC's ModelInfer
likewise). With --stream, the same tensors go as identity_test.py's --decoupled mode sends them
(gRPC only): start_stream, async_stream_infer with request id "1", stop_stream (which returns when
the server has ended the stream), then every response in order; the last one holds the answer,
and identity_test wants one response per generated token.

The prompt's ids come from the server's own preprocessing model, and the fastertransformer
model's output ids are read back to text through its postprocessing model, so nothing here needs
the tokenizer.

    python3 tests/guideclients.py --http 127.0.0.1:18000 --grpc 127.0.0.1:18001 \
        --prompt "Every role" --tokens 16 --end-id 0
"""

from __future__ import annotations

import argparse
import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

TRITON_TYPES = {"uint32": "UINT32", "float32": "FP32", "uint64": "UINT64", "bool": "BOOL", "int32": "INT32",
                "object": "BYTES"}  # fmt: skip


def one(value, dtype) -> np.ndarray:
    return np.array([[value]], dtype=dtype)


def ft_request(ids: list[int], tokens: int, end_id: int, repetition_penalty: float, beam: int = 1) -> dict:
    """What tools/gpt's end-to-end and identity clients send to the fastertransformer model."""
    return {
        "input_ids": np.array([ids], dtype=np.uint32),
        "input_lengths": one(len(ids), np.uint32),
        "request_output_len": one(tokens, np.uint32),
        "runtime_top_k": one(1, np.uint32),
        "runtime_top_p": one(0.0, np.float32),
        "beam_search_diversity_rate": one(0.0, np.float32),
        "temperature": one(1.0, np.float32),
        "len_penalty": one(1.0, np.float32),
        "repetition_penalty": one(repetition_penalty, np.float32),
        "random_seed": one(0, np.uint64),
        "is_return_log_probs": one(True, bool),
        "beam_width": one(beam, np.uint32),
        "start_id": one(end_id, np.uint32),
        "end_id": one(end_id, np.uint32),
        "bad_words_list": np.array([[[0], [-1]]], dtype=np.int32),
        "stop_words_list": np.array([[[0], [-1]]], dtype=np.int32),
        "prompt_learning_task_name_ids": one(0, np.uint32),
        "top_p_decay": one(1.0, np.float32),
        "top_p_min": one(0.0, np.float32),
        "top_p_reset_ids": one(end_id, np.uint32),
    }


def ensemble_request(prompt: str, tokens: int, end_id: int, repetition_penalty: float) -> dict:
    """What the KoGPT guide's HTTP client and the tutorial's gRPC client send to the ensemble."""
    words = np.array([[b""]], dtype=object)
    return {
        "INPUT_0": np.array([[prompt.encode()]], dtype=object),
        "INPUT_1": one(tokens, np.uint32),
        "INPUT_2": words,
        "INPUT_3": words,
        "runtime_top_k": one(1, np.uint32),
        "repetition_penalty": one(repetition_penalty, np.float32),
        "beam_search_diversity_rate": one(0.0, np.float32),
        "is_return_log_probs": one(True, bool),
        "end_id": one(end_id, np.uint32),
    }


def tensors(module, arrays: dict) -> list:
    made = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), TRITON_TYPES[array.dtype.name])
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made


def infer(module, url: str, model: str, arrays: dict, outputs: list[str]) -> dict:
    """One request with tritonclient's HTTP or gRPC client, as the guides' clients make it."""
    with module.InferenceServerClient(url) as client:
        result = client.infer(model, tensors(module, arrays), outputs=[module.InferRequestedOutput(o) for o in outputs])
        return {name: result.as_numpy(name) for name in outputs}


def stream(url: str, model: str, arrays: dict, outputs: list[str]) -> list[dict]:
    """One request over gRPC streaming, as identity_test.py --decoupled makes it: every response."""
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(model, tensors(grpcclient, arrays), request_id="1",
                                  outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])  # fmt: skip
        client.stop_stream()  # returns when the server has sent its last response and ended the stream
    responses = []
    while not answers.empty():
        result, error = answers.get()
        if error is not None:
            raise RuntimeError(f"{model}: {error}")
        responses.append({name: result.as_numpy(name) for name in outputs})
    if not responses:
        raise RuntimeError(f"{model}: the stream ended without a response")
    return responses


def run_clients(http: str, grpc: str, prompt: str, *, tokens: int, end_id: int, repetition_penalty: float = 1.0,
                beam: int = 0, streamed: bool = False) -> dict:  # fmt: skip
    """Every request above to the server at `http` and `grpc` (HOST:PORT each); what came back,
    with the number of responses each request got. `streamed`: the fastertransformer model and
    the ensemble over gRPC streaming (a decoupled model), the tokenizing models unary as before."""
    words = np.array([[b""]], dtype=object)
    pre = infer(httpclient, http, "preprocessing",
                {"QUERY": np.array([[prompt.encode()]], dtype=object), "BAD_WORDS_DICT": words,
                 "STOP_WORDS_DICT": words, "REQUEST_OUTPUT_LEN": one(tokens, np.uint32)},
                ["INPUT_ID", "REQUEST_INPUT_LEN"])  # fmt: skip
    ids = pre["INPUT_ID"].reshape(-1)[: int(pre["REQUEST_INPUT_LEN"].reshape(-1)[0])].tolist()
    seen: dict = {"ids": ids, "fastertransformer": {}, "ensemble": {}}

    def unary(module, url):
        return lambda model, arrays, outputs: [infer(module, url, model, arrays, outputs)]

    # Each way asks a model and gets its responses (one, unary); the gRPC one also asks the beams.
    ask_grpc = (lambda model, arrays, outputs: stream(grpc, model, arrays, outputs)) if streamed \
        else unary(grpcclient, grpc)  # fmt: skip
    ways = {"grpc-stream": (grpcclient, grpc, ask_grpc)} if streamed else {
        "http": (httpclient, http, unary(httpclient, http)),
        "grpc": (grpcclient, grpc, ask_grpc),
    }  # fmt: skip
    outputs = ["output_ids", "sequence_length", "cum_log_probs"]
    for label, (module, url, ask) in ways.items():
        answers = ask("fastertransformer", ft_request(ids, tokens, end_id, repetition_penalty), outputs)
        answer, length = answers[-1], int(answers[-1]["sequence_length"].reshape(-1)[0])
        post = infer(module, url, "postprocessing",
                     {"TOKENS_BATCH": answer["output_ids"].astype(np.uint32),
                      "sequence_length": answer["sequence_length"]}, ["OUTPUT"])  # fmt: skip
        seen["fastertransformer"][label] = {
            "output_ids": answer["output_ids"].reshape(-1)[:length].tolist(),
            "cum_log_probs": float(answer["cum_log_probs"].reshape(-1)[0]),
            "text": post["OUTPUT"].reshape(-1)[0].decode(),
            "responses": len(answers),
        }
        answers = ask("ensemble", ensemble_request(prompt, tokens, end_id, repetition_penalty),
                      ["OUTPUT_0", "cum_log_probs"])  # fmt: skip
        seen["ensemble"][label] = {"text": answers[-1]["OUTPUT_0"].reshape(-1)[0].decode(),
                                   "cum_log_probs": float(answers[-1]["cum_log_probs"].reshape(-1)[0]),
                                   "responses": len(answers)}  # fmt: skip
    if beam:
        answers = ask_grpc("fastertransformer", ft_request(ids, tokens, end_id, repetition_penalty, beam=beam), outputs)
        answer, lengths = answers[-1], answers[-1]["sequence_length"].reshape(beam)
        seen["beam"] = {
            "output_ids": [answer["output_ids"][0, b, : lengths[b]].tolist() for b in range(beam)],
            "cum_log_probs": answer["cum_log_probs"].reshape(beam).tolist(),
            "responses": len(answers),
        }
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http", required=True, help="tritonserver's HTTP endpoint, HOST:PORT")
    parser.add_argument("--grpc", required=True, help="tritonserver's gRPC endpoint, HOST:PORT")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--tokens", type=int, default=10)
    parser.add_argument("--end-id", type=int, required=True)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--beam", type=int, default=0, help="also identity_test's beam search of this width (gRPC)")
    parser.add_argument("--stream", action="store_true",
                        help="a decoupled model: gRPC streaming, as identity_test.py --decoupled")  # fmt: skip
    args = parser.parse_args()

    seen = run_clients(args.http, args.grpc, args.prompt, tokens=args.tokens, end_id=args.end_id,
                       repetition_penalty=args.repetition_penalty, beam=args.beam, streamed=args.stream)  # fmt: skip
    json.dump(seen, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
