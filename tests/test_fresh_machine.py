"""The README's main command on a fresh machine: `make lab` in a clean clone, as a newcomer types it.

A fresh Debian 12 container (the harness's base image: systemd, python3, sudo, nothing that the
project's setup installs) stands in for a new machine of this kind. It gets what such a machine
has and the project does not install: `make` (to type the command at all), this machine's CA
bundle, and what a user's network gives pip: the package index's URL and the certificate to
reach it (PIP_INDEX_URL, PIP_CERT), never a local wheel directory, an extra index or a
constraint file of this machine (a pin that only a local file satisfies must fail here).
A clean `git clone` of HEAD goes into it, and `make lab` runs there verbatim. So every program
the lab needs (git-lfs, python3-venv, debootstrap, Docker, ...) must come from the project's own
setup: a missing install step fails here, whatever this machine has.

Then, inside it: `make lab` installs neither torch nor transformers; the printed completion (asked
through HAProxy and the gateways with the OpenAI API) must be words and equal what transformers'
generate() makes of the same model and prompt (compared here, outside); the front wants a key
and streams the same text; a bad revision's canary goes back by itself, after which an apply
changes nothing (scripts/lab-canary); a rollout
over both hosts under load drops no request and changes on each host exactly its config, its
unit and its restart, draining it first; check mode previews a GPU change on one host without
changing it; Prometheus scrapes every layer; `make lab-down` leaves no lab container and no lab
sources. Hosts inside are reached through `docker exec`, services on their loopback only. (The
load in the recording rules, an alert firing and resolving and `ftfleet report` are checked by
molecule/site, whose Prometheus runs on a host of its own.) A second `make lab` is not run here:
that a second run of site.yml changes nothing is molecule/site's idempotence step, on more roles
than the lab has, and it cost this test 110 to 200 s of the suite's critical lane
(docs/testing.md, "Timing")."""

from __future__ import annotations

import json
import os
import re
import shlex
import string
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_playbook
from tritonlocal import greedy_completion

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.lab
FRESH = "ftfleet-fresh-machine"
PROJECT = "/root/ftfleet"
SOURCES = "/var/tmp/ftfleet-lab"
PROMPT = "Every role"  # scripts/lab's default prompt
TOKENS = 16
PYPI = "https://pypi.org/simple"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # the harness mounts this machine's bundle there


def machine() -> dict:
    """The fresh machine's platform: pip gets the index's URL and the certificate, nothing else."""
    env = {"PIP_INDEX_URL": os.environ.get("PIP_INDEX_URL") or PYPI, "PIP_CERT": CA_BUNDLE}
    platform = {
        "name": FRESH,
        "labels": {"ftfleet.docker-in-docker": "true", "ftfleet.fresh-machine": "true"},
        "env": env,
    }
    return {"molecule_yml": {"platforms": [platform]}}


def inside(command: str, timeout: int = 600) -> tuple[subprocess.CompletedProcess[str], float]:
    """A shell command in the fresh machine, in the clone, as root with the image's PATH."""
    started = time.monotonic()
    done = subprocess.run(["docker", "exec", "-w", PROJECT, FRESH, "bash", "-c", command], capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
    return done, time.monotonic() - started


def report(command: str) -> dict:
    """The newest ftfleet report of that command in the fresh machine's clone (runs/)."""
    done, _ = inside(f'cat "$(ls -d runs/*-{command} | tail -n 1)/report.json"')
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def all_reports(command: str) -> list[dict]:
    """Every ftfleet report of that command in the fresh machine's clone, oldest first."""
    done, _ = inside("python3 -c 'import glob, json; print(json.dumps([json.load(open(p)) for p in "
                     f"sorted(glob.glob(\"runs/*-{command}/report.json\"))]))'")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ftfleet(*args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess[str], float]:
    return inside(" ".join([".venv/bin/ftfleet", *map(shlex.quote, args)]), timeout=timeout)


def progress(out: str) -> str:
    """make lab's progress lines (each starts with the clock): where its time went."""
    return "\n".join(line for line in out.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line))


def completion(out: str, model: str = "tiny-gpt2") -> str:
    """The line `make lab` prints for a model after its 'completion through the ensemble' heading:
    tiny-gpt2's first, then (after a line that names it) tiny-neox's."""
    lines = out.splitlines()
    heading = max(i for i, line in enumerate(lines) if "completion through HAProxy and the gateways" in line)
    return lines[heading + {"tiny-gpt2": 1, "tiny-neox": 3}[model]]


def reference(tmp_path: Path, model: str = "tiny-gpt2") -> str:
    """transformers' greedy generate() on a model the lab made and served."""
    bare = tmp_path / f"{model}-bare.git"
    subprocess.run(["docker", "cp", f"{FRESH}:{SOURCES}/{model}.git", str(bare)], check=True)
    checkout = tmp_path / model
    env = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run(["git", "clone", "-q", f"file://{bare}", str(checkout)], env=env, check=True)
    return greedy_completion(checkout, PROMPT, TOKENS)


def assert_words(text: str, corpus: str) -> None:
    """Readable text: printable ASCII, and most of its words are words of the text it learned from."""
    assert all(c in string.printable for c in text), f"not printable text: {text!r}"
    vocabulary = set(re.findall(r"[A-Za-z]+", corpus))
    words = re.findall(r"[A-Za-z]+", text)
    known = [w for w in words if w in vocabulary]
    assert len(words) >= 4, f"too few words: {text!r}"
    assert len(known) >= 0.8 * len(words), f"not words: {text!r} ({known} of {words})"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh machine holding a clean clone of HEAD; removed afterwards with its volumes."""
    platforms = json.dumps(machine())
    created = run_playbook("molecule/resources/create.yml", "-e", platforms)
    try:
        assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
        apt = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null"
        done = subprocess.run(["docker", "exec", FRESH, "bash", "-c", apt], capture_output=True, text=True,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        clone = tmp_path_factory.mktemp("clone") / "ftfleet"
        subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True)
        subprocess.run(["docker", "cp", str(clone), f"{FRESH}:{PROJECT}"], check=True, capture_output=True)
        head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
        print(f"fresh machine {FRESH}: clean clone of {head} in {PROJECT}")
        # What the lab's model learned from (scripts/make-tiny-model --train-steps).
        yield subprocess.run(["git", "-C", str(clone), "show", "HEAD:lab/corpus.md"], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    finally:
        removed = run_playbook("molecule/resources/destroy.yml", "-e", platforms)
        assert removed.returncode == 0, removed.stdout[-3000:]


def test_make_lab_on_a_fresh_machine_serves_words_as_transformers(fresh, tmp_path):
    corpus = fresh
    first, took = inside("make lab", timeout=2400)
    out = first.stdout + first.stderr
    # A figure, not a bound (machines of this kind differ 2x in speed): the goal, under 300 s, is
    # docs/testing.md's, and every CI log keeps the figure with its steps.
    print(f"first make lab on the fresh machine: {took:.0f} s (goal: under 300 s)\n{progress(out)}")
    assert first.returncode == 0, out[-8000:]
    heavy, _ = inside(".venv/bin/python -c 'import importlib.util as u; print([m for m in (\"torch\", "
                      "\"transformers\") if u.find_spec(m)])'")  # fmt: skip
    assert heavy.stdout.strip() == "[]", f"make lab installed {heavy.stdout.strip()} ({heavy.stderr})"
    # make lab runs `ftfleet apply`: its report, counted from ansible-runner's events.
    applied = report("apply")
    assert applied["result"] == "ok", applied
    assert set(applied["hosts"]) == {"lab-node1", "lab-node2", "neox.lab-node1", "lab-lb"}
    assert all(h["failed"] == 0 and not h["unreachable"] for h in applied["hosts"].values()), applied["hosts"]
    stages = ["preflight", "gpu_hosts", "images", "models", "serve", "monitoring"]
    lb_stages = ["preflight", "serve", "monitoring"]
    # lab-node1's second model leaves the machine's stages (gpu_hosts, the exporters) to lab-node1
    slot_stages = ["preflight", "images", "models", "serve"]
    assert {host: list(row) for host, row in applied["changed"].items()} == {
        "lab-node1": stages, "lab-node2": stages, "neox.lab-node1": slot_stages, "lab-lb": lb_stages,
    }, applied["changed"]  # fmt: skip
    # The GPU-only roles say that they skip (ftfleet prints what the roles say).
    for role in ("nvidia_driver", "nvidia_container_toolkit", "ft_gemm_tune"):
        assert re.search(rf"{role}: lab-node1 has no", out), f"{role} did not announce its skip"
    served = completion(out)
    print(f"make lab printed: {served!r}")
    assert served == reference(tmp_path), out[-3000:]
    assert served.startswith(PROMPT)
    assert_words(served[len(PROMPT) :], corpus)
    # The second model on lab-node1 (a GPT-NeoX, through its own tritonserver on GPU 1) answers
    # through the same endpoint as transformers does.
    neox = completion(out, "tiny-neox")
    print(f"make lab printed for tiny-neox: {neox!r}")
    assert neox == reference(tmp_path, "tiny-neox"), out[-3000:]

    the_guides_clients_stream_the_same_completion_from_tritonserver(served)

    the_front_wants_a_key_and_streams_the_same_text()
    a_keys_limits_hold_over_both_hosts_and_its_scope_and_expiry_are_kept()
    a_bad_revision_goes_to_one_host_under_load_and_comes_back_by_itself()
    a_rollout_over_both_hosts_under_load_drops_no_request_and_changes_exactly_what_it_must(stages)
    status_shows_both_hosts_serving()
    plan_previews_a_gpu_change_without_changing_it()
    prometheus_scrapes_every_layer_of_the_lab()

    down, _ = inside("make lab-down")
    assert down.returncode == 0, down.stdout + down.stderr
    left, _ = inside("docker ps -aq --filter label=ftfleet.lab=true; test ! -e " + SOURCES + " || echo " + SOURCES)
    assert left.returncode == 0
    assert not left.stdout.strip(), f"make lab-down left: {left.stdout}"


def the_guides_clients_stream_the_same_completion_from_tritonserver(served: str) -> None:
    """fastertransformer_backend's tools/gpt clients' request to the fastertransformer model and
    the KoGPT guide's and the tutorial's ensemble request, their exact tensors (tests/guideclients.py),
    to lab-node1's tritonserver, whose ports the lab publishes on this machine's loopback (as
    triton_server_bind_address or an SSH forward gives a bench host them, docs/operations.md). The
    lab's model is decoupled, so they go as identity_test.py --decoupled sends them (gRPC
    streaming): one response per generated token, the last one the completion make lab printed
    through the gateways."""
    end_id = json.loads((ROOT / "lab" / "models" / "tiny-gpt2" / "config.json").read_text())["eos_token_id"]
    done, _ = inside(f".venv/bin/python tests/guideclients.py --http 127.0.0.1:18000 --grpc 127.0.0.1:18001 "
                     f"--stream --prompt {shlex.quote(PROMPT)} --tokens {TOKENS} --end-id {end_id}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    print(f"the guides' clients on lab-node1's tritonserver (streamed): {json.dumps(seen)}")
    ft, ensemble = seen["fastertransformer"]["grpc-stream"], seen["ensemble"]["grpc-stream"]
    generated = len(ft["output_ids"]) - len(seen["ids"])
    assert 0 < generated <= TOKENS, seen
    assert ft["text"] == served, seen
    assert ensemble["text"] == served, seen
    assert ft["responses"] == ensemble["responses"] == generated, seen


KEY = "ftf-lab-key-not-a-secret-0001"  # inventories/lab/group_vars/gpu_hosts/gateway.yml
FRONT_CHECK = r"""
import json, httpx
url = "http://127.0.0.1:18500/v1/completions"
body = {"model": "tiny-gpt2", "prompt": "Every role", "max_tokens": 12, "temperature": 0}
auth = {"Authorization": "Bearer KEY"}
out = {"no_key": httpx.post(url, json=body).status_code,
       "wrong_key": httpx.post(url, json=body, headers={"Authorization": "Bearer ftf-wrong-key-0000000"}).status_code,
       "bad_max_tokens": httpx.post(url, json={**body, "max_tokens": -1}, headers=auth).status_code}
whole = httpx.post(url, json=body, headers=auth, timeout=60).json()
out["text"], out["usage"] = whole["choices"][0]["text"], whole["usage"]
with httpx.stream("POST", url, json={**body, "stream": True}, headers=auth, timeout=60) as r:
    events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
out["chunks"] = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
out["done"] = events[-1]
from openai import OpenAI
client = OpenAI(base_url="http://127.0.0.1:18500/v1", api_key="KEY", max_retries=0)
asked = {"model": "tiny-gpt2", "prompt": "Every role", "max_tokens": 12, "temperature": 0}
out["openai"] = client.completions.create(**asked).choices[0].text
scored = client.completions.create(**asked, logprobs=1).choices[0]
out["logprobs"] = {"text": scored.text, "tokens": scored.logprobs.tokens, "values": scored.logprobs.token_logprobs}
out["beams"] = [c.text for c in client.completions.create(**asked, n=2, best_of=3).choices]
out["echo"] = client.completions.create(**asked, echo=True).choices[0].text
out["penalised"] = client.completions.create(**asked, extra_body={"repetition_penalty": 1.5}).choices[0].text
# chat, in the lab's template (h2oGPT's form): the completion of the rendered conversation
talk = {"model": "tiny-gpt2", "messages": [{"role": "user", "content": "Every role"}], "max_tokens": 12,
        "temperature": 0}
out["chat"] = client.chat.completions.create(**talk).choices[0].message.content
streamed = client.chat.completions.create(**talk, stream=True)
out["chat_streamed"] = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
rendered = {**asked, "prompt": "<human>: Every role\n<bot>:"}
out["chat_as_completion"] = client.completions.create(**rendered).choices[0].text
out["chat_bad_role"] = httpx.post(url.replace("/completions", "/chat/completions"), headers=auth,
                                  json={**talk, "messages": [{"role": "wizard", "content": "hi"}]}).status_code
print(json.dumps(out))
""".replace("KEY", KEY)


def the_front_wants_a_key_and_streams_the_same_text() -> None:
    """Through HAProxy on 127.0.0.1:18500: no key or a wrong key is a 401, a bad request a 400,
    a streamed completion is the same text as the whole one, and the openai client gets what
    FT adds (logprobs, n/best_of, echo, repetition_penalty)."""
    done, _ = inside(".venv/bin/python -c " + shlex.quote(FRONT_CHECK))
    assert done.returncode == 0, done.stdout + done.stderr
    front = json.loads(done.stdout)
    assert (front["no_key"], front["wrong_key"], front["bad_max_tokens"]) == (401, 401, 400), front
    assert front["usage"]["completion_tokens"] == 12
    assert "".join(front["chunks"]) == front["text"]
    assert len([c for c in front["chunks"] if c]) >= 5, front  # decoupled: one chunk per token or so
    assert front["done"] == "[DONE]"
    # the openai client, with what FT adds: log probabilities, beam search (n of best_of), echo,
    # repetition_penalty
    assert front["openai"] == front["text"]
    scored = front["logprobs"]
    assert scored["text"] == front["text"]
    assert "".join(scored["tokens"]) == scored["text"]
    assert all(v <= 0 for v in scored["values"]), scored
    assert any(v < 0 for v in scored["values"]), scored  # full log probabilities, not FT's greedy 0s
    assert len(front["beams"]) == 2
    assert front["echo"] == "Every role" + front["text"]
    assert front["penalised"], front  # answered (tests/test_gateway.py checks the penalty's effect)
    # chat: the openai client, whole and streamed, is the completion of the conversation in h2oGPT's form
    assert front["chat"] == front["chat_streamed"] == front["chat_as_completion"], front
    assert front["chat"], front
    assert front["chat_bad_role"] == 400, front


# The lab's keys for limits and scopes (inventories/lab/group_vars/gpu_hosts/gateway.yml).
LIMITS_CHECK = r"""
import contextlib, json, subprocess, httpx
url = "http://127.0.0.1:18500/v1/completions"
body = {"model": "tiny-gpt2", "prompt": "Every role", "max_tokens": 1, "temperature": 0}
def ask(key, client=httpx):
    r = client.post(url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return [r.status_code, (r.json().get("error") or {}).get("code"), r.headers.get("retry-after")]
def served():  # requests each lab host's gateway has answered (HAProxy's stot)
    stat = subprocess.run(["docker", "exec", "lab-lb", "sh", "-c",
                           "echo 'show stat' | socat stdio /run/haproxy/admin.sock"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    head = stat[0].lstrip("# ").split(",")
    rows = [dict(zip(head, line.split(","))) for line in stat[1:] if line]
    return {r["svname"]: int(r["stot"]) for r in rows if r["svname"].startswith("lab-node")}
before = served()
out = {"rate": [ask("ftf-lab-rate-key-not-a-secret-02") for _ in range(30)]}
after = served()
out["served"] = {name: after[name] - before[name] for name in after}
out["elsewhere"] = ask("ftf-lab-elsewhere-not-a-secret-04")
out["expired"] = ask("ftf-lab-expired-not-a-secret-005")
pair = {"Authorization": "Bearer ftf-lab-pair-key-not-a-secret-03"}
# Two streams that run long enough to ask a third time while both run: the lab's model answers
# "model" with 240 tokens (about 0.4 s), where "Every role" ends at its end token after 64 (0.1 s,
# a window that a faster gateway closed before the third request came).
long = {**body, "prompt": "model", "max_tokens": 240, "stream": True}  # the lab's context is 256
with httpx.Client(timeout=60) as a, httpx.Client(timeout=60) as b, contextlib.ExitStack() as held:
    lines = [held.enter_context(c.stream("POST", url, json=long, headers=pair)).iter_lines() for c in (a, b)]
    out["first_events"] = [next(line)[:6] for line in lines]  # both running now
    out["third"] = ask("ftf-lab-pair-key-not-a-secret-03")
    out["ends"] = [[line for line in rest if line][-1] for rest in lines]
out["after_both_ended"] = ask("ftf-lab-pair-key-not-a-secret-03")
# 300 tokens a minute (prompt + completion) over both hosts: answers until the key has spent them
# in the clock's minute (one minute: not near its end), then HAProxy's 429 until the minute ends.
import time
if time.time() % 60 > 40:
    time.sleep(61 - time.time() % 60)
spend = {**body, "max_tokens": 60}
out["tokens_spent"], out["tokens_header"] = [], []
for _ in range(30):
    r = httpx.post(url, json=spend, headers={"Authorization": "Bearer ftf-lab-tokens-key-not-a-secret-09"}, timeout=60)
    if r.status_code != 200:
        out["tokens_refused"] = [r.status_code, r.json()["error"]["code"], r.headers.get("retry-after")]
        break
    out["tokens_spent"].append(r.json()["usage"]["total_tokens"])
    out["tokens_header"].append(r.headers.get("x-ftfleet-tokens"))
print(json.dumps(out))
"""


def a_keys_limits_hold_over_both_hosts_and_its_scope_and_expiry_are_kept() -> None:
    """One key's 30 requests spread over both hosts: HAProxy lets 20 through (its rate over the
    fleet, where each gateway alone would allow 20) and answers the rest 429; a key limited to two
    requests at once gets a 429 for a third while two streams run; a key for another model gets a
    403 and an expired one a 401, from the gateways; a key of 300 tokens a minute is answered until
    it has spent them, then refused with 429 until the minute ends."""
    done, _ = inside(".venv/bin/python -c " + shlex.quote(LIMITS_CHECK))
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout)
    print(f"limits on the lab: {seen}")
    assert seen["rate"] == [[200, None, None]] * 20 + [[429, "rate_limit_exceeded", "4"]] * 10, seen["rate"]
    assert sum(seen["served"].values()) == 20, seen["served"]
    assert len(seen["served"]) == 2, seen["served"]
    assert all(n > 0 for n in seen["served"].values()), seen["served"]
    assert seen["elsewhere"][:2] == [403, "model_not_allowed"], seen
    assert seen["expired"][:2] == [401, "expired_api_key"], seen
    assert seen["first_events"] == ["data: ", "data: "], seen
    assert seen["third"] == [429, "concurrency_limit_exceeded", "1"], seen
    assert seen["ends"] == ["data: [DONE]"] * 2, seen
    assert seen["after_both_ended"][0] == 200, seen
    spent = seen["tokens_spent"]
    assert sum(spent) >= 300, seen  # refused only once the minute's 300 tokens were spent
    assert sum(spent[:-1]) < 300, seen
    assert seen["tokens_refused"][:2] == [429, "tokens_per_minute_exceeded"], seen
    assert 1 <= int(seen["tokens_refused"][2]) <= 60, seen  # Retry-After: the minute's end
    assert seen["tokens_header"] == [None] * len(spent), seen  # HAProxy keeps the gateways' count to itself


def a_bad_revision_goes_to_one_host_under_load_and_comes_back_by_itself() -> None:
    """Issue 36's second case, as scripts/lab-canary runs it (its own checks exit 1): a revision
    that loads and answers wrongly (scripts/lab-revision bad) goes to the canary, lab-node1, alone
    while four clients (two streamed) send completions through HAProxy; its golden prompt fails,
    and it goes back to the previous commit by itself (checkout, shards and repository files kept
    on the host: nothing fetched or converted); lab-node2 changes nothing; Alertmanager holds
    FleetCanaryRolledBack naming the commit; no request fails; with the previous commit back in
    main, an apply changes nothing. Each client waits a second between requests, as the rollout's
    clients below do: lab-canary's default, 0.25 s, makes 16 requests a second through both
    applies, CPU that the rollout's test below measured and that the other lane needs."""
    done, took = inside("python3 scripts/lab-canary --cases bad --window 20 --interval 1", timeout=1200)
    out = done.stdout + done.stderr
    print(f"a bad revision's canary on the lab, {took:.0f} s in all:\n{out[-3000:]}")
    assert done.returncode == 0, out[-6000:]
    bad = json.loads(out.strip().splitlines()[-1])["cases"]["bad"]
    assert bad["failed"] == 0, bad
    # No client was told the bad revision's answer: it failed its golden prompts before it took
    # traffic (HAProxy's counters of lab-node1 from then to the verdict: 0 sessions).
    assert bad["wrong"] == 0, bad
    assert bad["new_revision_requests"] == 0, bad
    assert bad["requests"] >= 50, bad
    assert "golden prompt 'Every role'" in bad["verdict"], bad
    assert bad["serving"]["lab-node1"] == bad["serving"]["lab-node2"] != bad["new"], bad
    assert bad["rollback_seconds"] is not None, bad
    assert bad["rollback_seconds"] > 0, bad
    # The apply with the bad revision restarted lab-node1's tritonserver twice (to the new commit,
    # then back) and changed nothing on lab-node2; the one after, with the old commit, nothing.
    applied = all_reports("apply")[-2:]
    first = applied[0]
    restarts = [(c["host"], c["role"]) for c in first["changes"] if c["task"] == "Restart tritonserver"]
    assert restarts == [("lab-node1", "triton_server"), ("lab-node1", "triton_server")], restarts
    assert not sum(first["changed"]["lab-node2"].values()), first["changed"]
    assert not any(sum(row.values()) for row in applied[1]["changed"].values()), applied[1]["changed"]


# What a batch-size change makes on each host, in order: config.pbtxt, the unit and the restart
# recorded (every host prepared at once), then in the rollout, host by host, the recorded restart:
# the drain in HAProxy (the rollout play's first task, no handler), the restart, and back into rotation.
ROLLOUT = [
    ("triton_model_repo", "Write the models' config.pbtxt", False),
    ("triton_server", "configure | Write triton-tiny-gpt2.service", False),
    ("triton_server", "Record tritonserver's restart for the rollout", True),
    ("lb_member", "Drain this host in the load balancers", False),
    ("triton_server", "service | Restart for the change recorded by the prepare phase or an earlier run", False),
    ("triton_server", "Restart tritonserver", True),
    ("lb_ready", "Put this host back on each load balancer, in model_tiny-gpt2", False),
]
# A model repository change goes to a canary first (role canary): lab-node1 keeps its repository
# files and a mark before the change, and loses the mark once judged; lab-node2 follows it.
CANARY_ROLLOUT = [
    ("triton_model_repo", "keep | Keep the model repository's files for a rollback", False),
    ("canary", "choose | Keep the canary's GEMM tuning and gateway settings, and mark it unjudged", False),
    *ROLLOUT,
    ("canary", "Record that the canary serves a judged revision", False),
]


def a_rollout_over_both_hosts_under_load_drops_no_request_and_changes_exactly_what_it_must(stages) -> None:
    """A config change of tiny-gpt2 (the run limited to its group and the load balancer), applied
    to the stages it touches (models, serve), restarts both its hosts one after the other while 4
    clients send tiny-gpt2 completions through HAProxy and 2 more send tiny-neox completions: each
    host is drained first and put back after its gates, so none fails, and restarting tiny-gpt2 on
    lab-node1 leaves the machine's other model, tiny-neox, serving (docs/placement.md); and each
    host changed exactly its config, its
    unit and its restart (molecule/site checks that a change of one host restarts that host
    alone). A model repository change is a canary's change: lab-node1 goes first and passes its
    judgement (the lab's 30 s window), then lab-node2 follows. Each client waits a second
    between requests: a steady load, not the most the lab takes (at a request every 0.25 s per
    client the load alone used 1.6 of the machine's 2 cores, about 110 ms of CPU a request, and
    slowed the rollout it watches and everything beside it; most of that was the CPU stand-in's
    OpenBLAS spinning, ~20 ms a request since the serving image sets OPENBLAS_NUM_THREADS=1)."""
    stop = "/tmp/ftfleet-stop-load"
    inside(f"rm -f {stop}")
    loads = {
        model: subprocess.Popen(
            ["docker", "exec", "-w", PROJECT, FRESH, ".venv/bin/python", "scripts/ftfleet-load", "--key", KEY,
             "--model", model, "--clients", str(clients), "--interval", "1", "--seconds", "900",
             "--max-requests", "6000", "--until", stop],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for model, clients in (("tiny-gpt2", 4), ("tiny-neox", 2))
    }  # fmt: skip
    try:
        time.sleep(3)
        # The stages a model's settings touch (docs/operations.md: --tags STAGE); preflight always
        # runs. The change is tiny-gpt2's: its group and the load balancer (extra vars reach every host).
        # What this checks is the rollout (no request dropped, each host changed as it must), not
        # the canary's latency judgement: on this 2-core machine beside the other lane, a canary
        # just restarted measured a p95 of 0.085 s against the other host's 0.049 s (1.74 > the
        # fleet's 1.5: the CI run of 09f3235), so the ratio here is lenient. scripts/lab-canary's
        # repo case judges it at 1.5, and the verdict's arithmetic has its unit tests.
        change = {"triton_model_repo_max_batch_size": 32, "fleet_canary_max_p95_ratio": 4}
        done, took = ftfleet("apply", "-t", "models,serve", "-l", "lab_tiny:lb_hosts", "-e", json.dumps(change))
        assert done.returncode == 0, done.stdout[-6000:]
        time.sleep(3)
    finally:
        inside(f"touch {stop}")
        answers = {model: load.communicate(timeout=180) for model, load in loads.items()}
    results = {model: json.loads(out.strip().splitlines()[-1]) for model, (out, _) in answers.items()}
    result, neox = results["tiny-gpt2"], results["tiny-neox"]
    print(
        f"rollout over both hosts in {took:.0f} s under load: {result['requests']} requests, "
        f"{result['failed']} failed ({result}); on lab-node1's other model, tiny-neox: {neox['requests']} requests, "
        f"{neox['failed']} failed ({neox})"
    )
    err = answers["tiny-gpt2"][1]
    assert neox["failed"] == 0, (neox, answers["tiny-neox"][1])
    assert neox["requests"] >= 25, neox
    changed = report("apply")
    restarted = [c["host"] for c in changed["changes"] if c["task"] == "Restart tritonserver"]
    assert restarted == ["lab-node1", "lab-node2"], restarted  # one after the other
    assert result["failed"] == 0, (result, err)
    assert result["requests"] >= 50, result
    assert result["seconds"] >= took, result  # the load lasted the whole rollout
    assert changed["canary"]["lab-node1"]["passed"] is True, changed["canary"]
    chose = [n["message"] for n in changed["notes"] if n["message"].startswith("canary: tiny-gpt2 changes its")]
    assert len(chose) == 1, changed["notes"]
    assert "model repository (" in chose[0], chose
    assert "fastertransformer/config.pbtxt" in chose[0], chose
    for host, models, serve, steps in (("lab-node1", 3, 7, CANARY_ROLLOUT), ("lab-node2", 1, 6, ROLLOUT)):
        ran = changed["changed"][host]
        assert {"preflight", "models", "serve"} <= ran.keys() <= set(stages), ran
        assert {stage: n for stage, n in ran.items() if n} == {"models": models, "serve": serve}, changed["changed"]
        made = [(c["role"], c["task"], c.get("handler", False)) for c in changed["changes"] if c["host"] == host]
        assert made == steps, (host, made)
    lb = changed["changed"]["lab-lb"]
    assert {"preflight", "serve"} <= lb.keys(), changed["changed"]
    assert not any(lb.values()), changed["changed"]
    # each host's restart timed, from its drain to its return (ftfleet plan estimates rollouts from them)
    print(f"restart seconds per host: {changed['rollout']}")
    assert set(changed["rollout"]) == {"lab-node1", "lab-node2"}
    assert min(changed["rollout"].values()) > 0


def status_shows_both_hosts_serving() -> None:
    done, _ = ftfleet("status", "--interval", "1")
    assert done.returncode == 0, done.stdout[-4000:]
    rows = {row["host"]: row for row in report("status")["status"]}
    assert set(rows) == {"lab-node1", "lab-node2", "neox.lab-node1", "lab-lb"}
    # The lab's load balancer listens on loopback only, in plain HTTP: no certificate to count down.
    assert (rows["lab-lb"]["model"], rows["lab-lb"]["health"], rows["lab-lb"]["tls_days_left"]) == (
        "load balancer", "plain HTTP", None), rows["lab-lb"]  # fmt: skip
    for host, model, gpus, machine in (("lab-node1", "tiny-gpt2", [0], "lab-node1"),
                                       ("lab-node2", "tiny-gpt2", [0, 1], "lab-node2"),
                                       ("neox.lab-node1", "tiny-neox", [1], "lab-node1")):  # fmt: skip
        row = rows[host]
        assert (row["model"], row["tp"], row["unit"], row["health"]) == (model, len(gpus), "active", "ready"), row
        assert len(row["commit"]) == 40
        assert row["image"], row
        assert row["requests_per_second"] is not None, row  # the metrics endpoint answered
        # the GPUs the model holds, its machine, and the machine's own GPUs from its gpus fact: the
        # lab's hosts have none
        assert (row["gpus"], row["machine"], row["gpus_total"], row["gpus_free"]) == (gpus, machine, 0, []), row


def plan_previews_a_gpu_change_without_changing_it() -> None:
    """Check mode previews a GPU change on one host, changes nothing, and the gate still runs.
    lab-node2 (a machine with one model) goes from tp 2 to 4; extra vars reach every host, and
    the same GPUs on lab-node1 and its second model clash, which preflight says on those hosts
    only (they are not in this run; a run that took them would stop)."""
    preview, _ = ftfleet("plan", "--diffs", "--limit", "lab-node2", "-e", '{"fleet_gpu_devices": [0, 1, 2, 3]}')
    out = preview.stdout + preview.stderr
    assert preview.returncode == 0, out[-6000:]
    planned = report("plan")
    assert set(planned["changed"]) == {"lab-node2"}
    # config.pbtxt and the unit would change (the conversion is announced: check mode converts nothing)
    assert planned["changed"]["lab-node2"]["models"] >= 1, planned["changed"]
    assert planned["changed"]["lab-node2"]["serve"] >= 1, planned["changed"]
    assert "fastertransformer/1/4-gpu would be converted" in " ".join(out.split())
    assert '+parameters { key: "tensor_para_size" value: { string_value: "4" } }' in out
    assert "+    --label=ftfleet.gpus=0,1,2,3" in out
    assert "lab-node2 gateway answers" in out  # the gate asked through the front
    assert "placement: lab-node2 tiny-gpt2: GPUs 0,1 -> 0,1,2,3" in out  # docs/placement.md
    assert report("plan")["placement"] == [
        {"host": "lab-node2", "model": "tiny-gpt2", "before": "0,1", "after": "0,1,2,3"}]  # fmt: skip
    # the rollout it would make: lab-node2 alone, timed by the rollout's apply above
    said = " ".join(out.split())
    assert "serve: 1 host(s) restart in 1 of 1 batch(es) of 1 host(s) (fleet_serve_serial=1); about" in said, said
    served_config = "/srv/ftfleet/models/tiny-gpt2/fastertransformer/config.pbtxt"
    still, _ = inside(f"docker exec lab-node2 grep -c '/fastertransformer/1/2-gpu\"' {served_config}")
    assert still.stdout.strip() == "1", "check mode changed the served config.pbtxt"


# Prometheus on lab-lb (inventories/lab/group_vars/monitoring_hosts), scraping every 5 s.
TARGETS_CHECK = r"""
import json, time, urllib.request
def targets():
    with urllib.request.urlopen("http://127.0.0.1:19090/api/v1/targets", timeout=10) as answer:
        return sorted([t["labels"]["job"], t["labels"]["instance"], t["health"]]
                      for t in json.load(answer)["data"]["activeTargets"])
for _ in range(30):  # a tritonserver restarted by the rollout may not have been scraped yet
    seen = targets()
    if all(health == "up" for _, _, health in seen):
        break
    time.sleep(2)
print(json.dumps(seen))
"""


# Each GPU's DCGM series and the model that holds it (on lab-node1, two models: placement's relabelling).
GPU_MODELS_CHECK = r"""
import json, urllib.parse, urllib.request
query = urllib.parse.quote("count by (instance, gpu, model) (DCGM_FI_DEV_GPU_UTIL)")
with urllib.request.urlopen("http://127.0.0.1:19090/api/v1/query?query=" + query, timeout=10) as answer:
    found = json.load(answer)["data"]["result"]
print(json.dumps(sorted([r["metric"]["instance"], r["metric"]["gpu"], r["metric"].get("model")] for r in found)))
"""


def prometheus_scrapes_every_layer_of_the_lab() -> None:
    """Prometheus on lab-lb scrapes all 14 targets of the lab, every layer of every host, up (the
    machine's exporters once, each model's gateway and tritonserver), and each of lab-node1's GPUs
    carries the model that holds it. The
    load in the recording rules, an alert firing and resolving, and `ftfleet report` are checked
    on the production-shaped fleet (molecule/site, Prometheus on a host of its own)."""
    done, _ = inside(".venv/bin/python -c " + shlex.quote(TARGETS_CHECK), timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    jobs = {
        "lab-node1": ["dcgm", "gateway", "node", "triton"],
        "lab-node2": ["dcgm", "gateway", "node", "triton"],
        "neox.lab-node1": ["gateway", "triton"],
        "lab-lb": ["alertmanager", "haproxy", "node", "prometheus"],
    }
    seen = json.loads(done.stdout)
    assert seen == sorted([job, host, "up"] for host, js in jobs.items() for job in js), seen
    query = "count by (instance, gpu, model) (DCGM_FI_DEV_GPU_UTIL)"
    asked, _ = inside(".venv/bin/python -c " + shlex.quote(GPU_MODELS_CHECK), timeout=60)
    assert asked.returncode == 0, asked.stdout[-2000:] + asked.stderr[-2000:]
    assert json.loads(asked.stdout) == [
        ["lab-node1", "0", "tiny-gpt2"],
        ["lab-node1", "1", "tiny-neox"],
        ["lab-node2", "0", "tiny-gpt2"],
        ["lab-node2", "1", "tiny-gpt2"],
    ], query
