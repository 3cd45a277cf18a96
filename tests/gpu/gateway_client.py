"""The openai client's side of the real stack's gateway check (tests/gpu/stack.py runs it in a
virtualenv of its own, with the openai package from carried wheels): the requests a user of the
fleet sends, their answers printed as one JSON object for stack.py to judge.

    python gateway_client.py --base http://127.0.0.1:PORT/v1 --model NAME --prompt TEXT --tokens N
                             [--stop TEXT]
"""

from __future__ import annotations

import argparse
import json
import sys

import openai


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--stop", default="", help="a stop sequence to try (empty: none)")
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base, api_key="unused-anonymous", max_retries=0, timeout=120)
    ask = {"model": args.model, "prompt": args.prompt, "max_tokens": args.tokens, "temperature": 0}
    found: dict = {"errors": {}}

    def each(name: str, ask_it) -> None:  # one failing request is reported, the others still asked
        try:
            found[name] = ask_it()
        except openai.OpenAIError as err:
            found["errors"][name] = f"{type(err).__name__}: {err}"

    def greedy() -> dict:
        whole = client.completions.create(**ask)
        return {"text": whole.choices[0].text, "finish_reason": whole.choices[0].finish_reason,
                "usage": whole.usage.model_dump() if whole.usage else None}  # fmt: skip

    def scored() -> dict:
        choice = client.completions.create(**ask, logprobs=1).choices[0]
        return {"text": choice.text, "token_logprobs": choice.logprobs.token_logprobs}

    def stopped() -> dict:
        choice = client.completions.create(**ask, stop=[args.stop]).choices[0]
        return {"text": choice.text, "finish_reason": choice.finish_reason}

    each("models", lambda: [m.id for m in client.models.list().data])
    each("greedy", greedy)
    each("streamed", lambda: [c.choices[0].text for c in client.completions.create(**ask, stream=True) if c.choices])
    each("penalty", lambda: client.completions.create(**ask, extra_body={"repetition_penalty": 1.3}).choices[0].text)
    each("beam2", lambda: [c.text for c in sorted(client.completions.create(**ask, n=2, best_of=2).choices,
                                                  key=lambda c: c.index)])  # fmt: skip
    each("logprobs", scored)
    if args.stop:
        each("stop", stopped)
    json.dump(found, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
