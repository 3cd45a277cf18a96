"""The canary of a model's new revision (role canary): which hosts go first, what Prometheus is
asked about them, and the verdict from its answers and the golden prompts' answers."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ftdomain.inputs.common import whole
from ftdomain.values import truthy


def canary_change(
    serving: Mapping[str, Any] | None,
    target: str,
    revision_changes: Any,
    repository_present: Any,
    repository_stale: list[str],
    image_now: Mapping[str, Any] | None,
    image_next: str,
    gemm_changes: Any = False,
    gateway_changes: list[str] | None = None,
) -> dict[str, Any]:
    """What about a host's answers this run changes, read before anything changes (role canary,
    tasks_from choose). `serving` is what its published shards were made from (ft_convert
    tasks_from serving; empty: it serves nothing yet, and a first deployment is no change);
    `revision_changes` whether their commit, tp or weight dtype differs from the inventory's;
    `repository_present` whether the host has a model repository yet and `repository_stale` the
    files the role would write (triton_model_repo tasks_from compare publishes both); `image_now` the
    image of the running tritonserver container (id, ref; empty when none runs) and
    `image_next` the id of the image this run serves; `gemm_changes` whether tritonserver would
    read another gemm_config.in (ft_gemm_tune tasks_from compare: FT's kernels for each GEMM,
    which a wrong tuning can make fail or answer otherwise); `gateway_changes` the gateway's
    settings that change answers and would change (gateway tasks_from compare). Returns revision
    (bool), repository (the files that change), image (the running one, kept for a rollback, when
    the image changes), gemm (bool), gateway (the settings that change), changes (any of them)
    and said (a line for people)."""
    serves = bool(serving)
    revision = serves and truthy(revision_changes)
    repository = sorted(repository_stale) if serves and truthy(repository_present) else []
    now = dict(image_now or {})
    image = now if serves and now.get("id") and image_next and now["id"] != image_next else {}
    said = []
    if revision:
        old = (serving or {}).get("checkpoint") or "?"
        said.append(f"revision {old[:12]} -> {(target or '?')[:12]}" if old != target else "tp or weight dtype")
    if repository:
        said.append("model repository (" + ", ".join(repository) + ")")
    if image:
        said.append(f"serving image {image['id'][:19]} -> {image_next[:19]}")
    gemm = serves and truthy(gemm_changes)
    if gemm:
        said.append("GEMM tuning (gemm_config.in)")
    gateway = sorted(gateway_changes or []) if serves else []
    if gateway:
        said.append("gateway settings (" + ", ".join(gateway) + ")")
    return {"revision": revision, "repository": repository, "image": image, "gemm": gemm, "gateway": gateway,
            "changes": bool(said), "said": "; ".join(said)}  # fmt: skip


def canary_picks(hosts: list[str], hostvars: Mapping[str, Any], enabled: Any) -> dict[str, str]:
    picks: dict[str, str] = {}
    taken: dict[str, int] = {}
    for host in hosts:
        v = hostvars[host]
        serves_a_change = truthy(v.get("canary_changes", False)) and truthy(v.get("fleet_gateway", True))
        if not truthy(enabled) or not serves_a_change:
            picks[host] = "none"
            continue
        model = (v.get("fleet_model") or {}).get("name", "")
        limit = int(v.get("fleet_canary_hosts", 1))
        if limit <= 0:
            picks[host] = "none"
        elif taken.get(model, 0) < limit:
            taken[model] = taken.get(model, 0) + 1
            picks[host] = "canary"
        else:
            picks[host] = "wait"
    return picks


def canary_held(host: str, hostvars: Mapping[str, Any], canaries: list[str]) -> str:
    """Why `host`, waiting for its model's canaries, must keep the revision it serves: a canary of
    its model with no verdict (its rollout or gates failed, or it was not judged) or one that
    failed. Empty when every canary of its model passed."""
    model = (hostvars[host].get("fleet_model") or {}).get("name", "")
    for canary in canaries:
        v = hostvars[canary]
        if (v.get("fleet_model") or {}).get("name", "") != model:
            continue
        verdict = v.get("canary_verdict")
        if not isinstance(verdict, Mapping):
            return f"canary {canary} of {model} has no verdict (it failed before it was judged)"
        if not truthy(verdict.get("passed")):
            return f"canary {canary} of {model} failed: " + "; ".join(verdict.get("reasons") or [])
    return ""


def _label(value: str) -> str:
    """A PromQL string literal's inside."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def canary_queries(host: str, model: str, backend: str, canaries: list[str], seconds: int) -> dict[str, str]:
    """The PromQL instant queries, evaluated at the end of the window of `seconds`, that judge
    `host`: what clients got from it through the load balancers (HAProxy's own per-server count,
    after its retries: a 503 it retried elsewhere is no client's failure), what its gateway
    answered (the host's view), its p95 latency against the model's hosts that are no canary,
    and tritonserver's restarts (a counter reset, or a scrape that found it down)."""
    w = f"[{int(seconds)}s]"
    srv = f'proxy="{_label(backend)}",server="{_label(host)}"'
    gw = f'model="{_label(model)}",instance="{_label(host)}",route!="/v1/models"'
    others = "|".join(re.escape(c) for c in canaries) or re.escape(host)
    base = f'model="{_label(model)}",instance!~"{_label(others)}",route!="/v1/models"'
    triton = f'job="triton",instance="{_label(host)}"'
    host = f'model="{_label(model)}",instance="{_label(host)}"'
    return {
        "client_requests": f"sum(increase(haproxy_server_http_responses_total{{{srv}}}{w}))",
        "client_errors": f'sum(increase(haproxy_server_http_responses_total{{{srv},code="5xx"}}{w}))',
        "retried_elsewhere": f"sum(increase(haproxy_server_retry_warnings_total{{{srv}}}{w}))",
        "host_requests": f"sum(increase(ftgateway_requests_total{{{gw}}}{w}))",
        "host_errors": f'sum(increase(ftgateway_requests_total{{{gw},status=~"5.."}}{w}))',
        "p95_seconds": f"histogram_quantile(0.95, sum by (le) (rate(ftgateway_request_seconds_bucket{{{gw}}}{w})))",
        "baseline_p95_seconds": (
            f"histogram_quantile(0.95, sum by (le) (rate(ftgateway_request_seconds_bucket{{{base}}}{w})))"
        ),
        # Its generations whose tritonserver failed mid-answer, continued on another host or not
        # (the gateway's continuations, docs/operations.md): shown, the restarts above judge them.
        "continued": f'sum(increase(ftgateway_continuations_total{{{host},outcome="continued"}}{w}))',
        "continuations_failed": f'sum(increase(ftgateway_continuations_total{{{host},outcome="failed"}}{w}))',
        "counter_resets": f"max(resets(nv_inference_request_success{{{triton}}}{w}))",
        "down_scrapes": f"sum(count_over_time(up{{{triton}}}{w})) - sum(sum_over_time(up{{{triton}}}{w}))",
    }


def _number(answer: Any) -> float | None:
    """The value of a Prometheus instant query's answer (api/v1/query JSON), None when it has no
    series or is not a number (NaN: a ratio over no requests)."""
    try:
        result = answer["data"]["result"]
    except (KeyError, TypeError):
        return None
    if not result:
        return None
    try:
        value = float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# What no revision worth serving answers, whatever its prompt (checked on every golden prompt and
# on the probe that every canary is asked): U+FFFD stands for bytes that decode to no text.
REPLACEMENT = "\ufffd"


def _nonsense(prompt: str, text: str, choice: Mapping[str, Any], usage: Mapping[str, Any], asked: int) -> str:
    """Why an answer is wrong whatever was expected ('' when it is not): empty, ended at once, or
    holding replacement characters (one or more at the very end of a completion cut by max_tokens
    are a character cut in two, not a fault)."""
    finish, tokens = choice.get("finish_reason"), usage.get("completion_tokens")
    if not text.strip():
        return f"golden prompt {prompt!r}: answered nothing ({finish or 'no finish_reason'})"
    if finish == "stop" and isinstance(tokens, int) and tokens < 2 <= asked:
        return f"golden prompt {prompt!r}: ended at once ({tokens} token of {asked}: {text!r})"
    body = text.rstrip(REPLACEMENT) if finish == "length" else text
    if REPLACEMENT in body:
        count = body.count(REPLACEMENT)
        return f"golden prompt {prompt!r}: answered {text!r}, with {count} replacement character(s) (U+FFFD)"
    return ""


def canary_golden_failures(results: list[Mapping[str, Any]]) -> list[str]:
    """What the golden prompts got wrong: `results` are the registered uri results of the
    completions (each with its prompt as `item`). Every answer must be text that is not empty,
    not ended at once and without replacement characters; then as its item expects: `expected`
    (the whole completion), `expected_prefix` or `expected_regex` (re.search); an item without
    an expectation (the probe) has those checks only."""
    failures = []
    for r in results:
        item = r.get("item") or {}
        prompt = item.get("prompt", "")
        if r.get("status") != 200:
            failures.append(f"golden prompt {prompt!r}: HTTP {r.get('status')} {r.get('msg', '')}".strip())
            continue
        try:
            choice = r["json"]["choices"][0]
            text = choice["text"]
        except (KeyError, IndexError, TypeError):
            failures.append(f"golden prompt {prompt!r}: no completion text in the answer")
            continue
        usage = r["json"].get("usage") or {}
        if "expected" in item and text != item["expected"]:
            failures.append(f"golden prompt {prompt!r}: answered {text!r}, expected {item['expected']!r}")
        elif "expected_prefix" in item and not text.startswith(item["expected_prefix"]):
            failures.append(
                f"golden prompt {prompt!r}: answered {text!r}, expected it to start with {item['expected_prefix']!r}"
            )
        elif "expected_regex" in item and not re.search(item["expected_regex"], text):
            regex = item["expected_regex"]
            failures.append(f"golden prompt {prompt!r}: answered {text!r}, which {regex!r} does not match")
        elif why := _nonsense(prompt, text, choice, usage, int(item.get("max_tokens", 16))):
            failures.append(why)
    return failures


def haproxy_sessions(outputs: list[Mapping[str, Any]], backend: str, server: str) -> int | None:
    """The sessions a server of a backend has had, summed over the load balancers: `outputs` are
    the registered results of `show stat` on each (its CSV; stot is the eighth field). None when
    one of them has no such server or could not be read."""
    total = 0
    for out in outputs:
        rows = [line.split(",") for line in str(out.get("stdout", "")).splitlines() if not line.startswith("#")]
        found = [row for row in rows if len(row) > 7 and row[0] == backend and row[1] == server]
        if out.get("rc", 0) != 0 or not found or not found[0][7].isdigit():
            return None
        total += int(found[0][7])
    return total


def _taken(sessions: Any) -> int | None:
    """The sessions between two counts of them ([before, after]; None where either is unknown)."""
    if not isinstance(sessions, list | tuple) or len(sessions) != 2:
        return None
    before, after = (whole(v) for v in sessions)
    return after - before if before is not None and after is not None and 0 <= before <= after else None


def canary_verdict(
    results: list[Mapping[str, Any]],
    limits: Mapping[str, Any],
    failures: list[str],
    seconds: int,
    asked: str = "Prometheus",
    gate_failure: str = "",
    sessions: Any = None,
) -> dict:
    """The verdict on one canary. `results` are the registered uri results of Prometheus's
    answers to canary_queries (each with its query's name as item.key; none when it was not
    asked: no monitoring host, or a golden prompt failed first); a question `asked` could not
    answer is a reason too. `limits` has max_error_ratio, max_p95_ratio and max_restarts;
    `failures` are the reasons found before (golden prompts), `gate_failure` why its restart or
    gates failed in the rollout (it fails the canary first); `sessions` the [before, after] counts
    of the sessions the load balancers gave it, from just before it could take traffic to the
    verdict (measure new_revision_requests: 0 for a canary that failed before its traffic).
    Returns passed, reasons (each with the measure, its value, the threshold and the window) and
    measures (every value, None where there was nothing to measure)."""
    m: dict[str, float | None] = {}
    reasons = ([gate_failure] if gate_failure else []) + list(failures)
    for r in results:
        item = r.get("item")
        if r.get("skipped") or not isinstance(item, Mapping) or "key" not in item:
            continue  # not asked (the task was skipped)
        if r.get("status") != 200:
            reasons.append(f"{asked} did not answer {item['key']} (HTTP {r.get('status')}: {r.get('msg', '')})")
        m[item["key"]] = _number(r.get("json"))
    measures: dict[str, Any] = {
        "client_requests": m.get("client_requests"),
        "client_error_ratio": _ratio(m.get("client_errors"), m.get("client_requests")),
        "retried_elsewhere": m.get("retried_elsewhere"),
        "host_requests": m.get("host_requests"),
        "host_error_ratio": _ratio(m.get("host_errors"), m.get("host_requests")),
        "p95_seconds": m.get("p95_seconds"),
        "baseline_p95_seconds": m.get("baseline_p95_seconds"),
        "p95_ratio": _ratio(m.get("p95_seconds"), m.get("baseline_p95_seconds")),
        "tritonserver_restarts": None,
        "continued_elsewhere": m.get("continued"),
        "continuations_failed": m.get("continuations_failed"),
        "golden_prompt_failures": len(failures),
        "gates_failed": bool(gate_failure),
        "new_revision_requests": _taken(sessions),
    }
    if m.get("counter_resets") is not None or m.get("down_scrapes") is not None:
        resets = m.get("counter_resets") or 0.0
        measures["tritonserver_restarts"] = int(max(resets, 1.0 if (m.get("down_scrapes") or 0) > 0 else 0.0))
    window = f"over {int(seconds)} s"
    ratio, limit = measures["client_error_ratio"], float(limits["max_error_ratio"])
    if ratio is not None and ratio > limit:
        reasons.append(
            f"client error ratio {ratio:.4f} > {limit} {window} (5xx that clients got through the load "
            f"balancers: {m['client_errors']:.0f} of {m['client_requests']:.0f})"
        )
    p95, limit = measures["p95_ratio"], float(limits["max_p95_ratio"])
    if p95 is not None and p95 > limit:
        reasons.append(
            f"p95 latency {measures['p95_seconds']:.3f} s is {p95:.2f} times the other hosts' "
            f"{measures['baseline_p95_seconds']:.3f} s > {limit} {window}"
        )
    restarts, limit = measures["tritonserver_restarts"], int(limits["max_restarts"])
    if restarts is not None and restarts > limit:
        reasons.append(f"tritonserver restarts {restarts} > {limit} {window}")
    return {"passed": not reasons, "reasons": reasons, "measures": measures}


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return part / whole
