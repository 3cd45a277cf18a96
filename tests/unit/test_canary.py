"""Role canary's decisions (filter_plugins/canary.py): which hosts go first, what Prometheus is
asked, and the verdict from its answers and the golden prompts'."""

from __future__ import annotations

import pytest

from ftdomain.fleet.canary import (
    canary_change,
    canary_golden_failures,
    canary_held,
    canary_picks,
    canary_queries,
    canary_verdict,
    haproxy_sessions,
)

LIMITS = {"max_error_ratio": 0.01, "max_p95_ratio": 1.5, "max_restarts": 0}


def host(model: str, changes: bool, hosts: int = 1, verdict: dict | None = None) -> dict:
    facts = {"fleet_model": {"name": model}, "canary_changes": changes, "fleet_canary_hosts": hosts}
    return {**facts, "canary_verdict": verdict} if verdict is not None else facts


def test_per_model_the_first_changing_hosts_go_first_and_the_other_changing_ones_wait():
    hv = {"a1": host("a", False), "a2": host("a", True), "a3": host("a", True), "a4": host("a", True),
          "b1": host("b", True, hosts=2), "b2": host("b", "true", hosts=2), "b3": host("b", True, hosts=2),
          "c1": host("c", True, hosts=0), "c2": host("c", True, hosts=0),
          "d1": {**host("d", True), "fleet_gateway": False}}  # fmt: skip
    picks = canary_picks(list(hv), hv, enabled=True)
    assert picks == {"a1": "none", "a2": "canary", "a3": "wait", "a4": "wait", "b1": "canary", "b2": "canary",
                     "b3": "wait", "c1": "none", "c2": "none", "d1": "none"}  # fmt: skip
    # a run that does not serve (models stage alone, check mode): every host as before
    assert set(canary_picks(list(hv), hv, enabled=False).values()) == {"none"}


SERVING = {"checkpoint": "a" * 40, "tp": 1, "weight_dtype": "fp16"}
REPO = ["644 0123 fastertransformer/config.pbtxt", "644 4567 ensemble/config.pbtxt"]
OLD_IMAGE = {"id": "sha256:" + "1" * 64, "ref": "ftfleet/tritonserver-ft:22.04-aaaa"}


@pytest.mark.parametrize(
    ("revision", "stale", "next_image", "said"),
    [
        (False, [], OLD_IMAGE["id"], ""),
        (True, [], OLD_IMAGE["id"], "revision aaaaaaaaaaaa -> bbbbbbbbbbbb"),
        (False, ["ensemble/config.pbtxt"], OLD_IMAGE["id"], "model repository (ensemble/config.pbtxt)"),
        (False, [], "sha256:" + "2" * 64, "serving image sha256:111111111111 -> sha256:222222222222"),
        (True, ["ensemble/config.pbtxt"], "sha256:" + "2" * 64,
         "revision aaaaaaaaaaaa -> bbbbbbbbbbbb; model repository (ensemble/config.pbtxt); "
         "serving image sha256:111111111111 -> sha256:222222222222"),
    ],
)  # fmt: skip
def test_a_new_revision_model_repository_or_serving_image_is_a_change_that_goes_to_a_canary(
    revision, stale, next_image, said
):
    change = canary_change(SERVING, "b" * 40, revision, REPO, stale, OLD_IMAGE, next_image)
    assert change["said"] == said
    assert change["changes"] == bool(said)
    assert change["revision"] is revision
    assert change["repository"] == stale
    # the image it ran is kept for the rollback, only when it changes
    assert change["image"] == (OLD_IMAGE if next_image != OLD_IMAGE["id"] else {})


def test_a_host_that_serves_nothing_yet_or_whose_image_is_unknown_has_no_change():
    image = "sha256:" + "2" * 64
    # a first deployment: nothing served, every file to write
    assert canary_change({}, "b" * 40, True, [], ["fastertransformer/config.pbtxt"], {}, image)["changes"] is False
    # a repository that is not all there is no canary's change (nothing served from it)
    same = OLD_IMAGE["id"]
    assert canary_change(SERVING, "a" * 40, False, [], ["ensemble/config.pbtxt"], OLD_IMAGE, same)["changes"] is False
    # no container runs (stopped), or the next image is not on the host: the image is not judged
    assert canary_change(SERVING, "a" * 40, False, REPO, [], {}, image)["changes"] is False
    assert canary_change(SERVING, "a" * 40, False, REPO, [], OLD_IMAGE, "")["changes"] is False
    # the same commit with another tp or weight dtype
    assert canary_change(SERVING, "a" * 40, True, REPO, [], OLD_IMAGE, OLD_IMAGE["id"])["said"] == "tp or weight dtype"


def test_another_gemm_config_is_a_change_that_goes_to_a_canary():
    same = OLD_IMAGE["id"]
    change = canary_change(SERVING, "a" * 40, False, REPO, [], OLD_IMAGE, same, gemm_changes=True)
    assert (change["changes"], change["gemm"], change["said"]) == (True, True, "GEMM tuning (gemm_config.in)")
    both = canary_change(SERVING, "b" * 40, True, REPO, [], OLD_IMAGE, same, gemm_changes="true")
    assert both["said"].endswith("; GEMM tuning (gemm_config.in)")
    # a host that serves nothing yet has nothing to judge; no other gemm_config.in, no change
    assert canary_change({}, "a" * 40, False, REPO, [], OLD_IMAGE, same, gemm_changes=True)["changes"] is False
    assert canary_change(SERVING, "a" * 40, False, REPO, [], OLD_IMAGE, same)["gemm"] is False


def test_a_change_of_the_gateways_settings_that_change_answers_goes_to_a_canary():
    same = OLD_IMAGE["id"]
    change = canary_change(SERVING, "a" * 40, False, REPO, [], OLD_IMAGE, same,
                           gateway_changes=["max_tokens_limit", "chat_template"])  # fmt: skip
    assert change["changes"] is True
    assert change["gateway"] == ["chat_template", "max_tokens_limit"]
    assert change["said"] == "gateway settings (chat_template, max_tokens_limit)"
    assert canary_change({}, "a" * 40, False, REPO, [], OLD_IMAGE, same, gateway_changes=["chat_template"])[
        "changes"] is False  # fmt: skip
    assert canary_change(SERVING, "a" * 40, False, REPO, [], OLD_IMAGE, same, gateway_changes=[])["changes"] is False


def test_a_waiting_host_is_held_until_every_canary_of_its_model_passed():
    passed = {"passed": True, "reasons": []}
    failed = {"passed": False, "reasons": ["golden prompt 'Hi': answered ' x', expected ' y'"]}
    hv = {"a1": host("a", True, verdict=passed), "a2": host("a", True, verdict=failed), "a3": host("a", True),
          "b1": host("b", True), "b2": host("b", True)}  # fmt: skip
    assert canary_held("a3", hv, ["a1"]) == ""
    assert (
        canary_held("a3", hv, ["a1", "a2"]) == "canary a2 of a failed: golden prompt 'Hi': answered ' x', expected ' y'"
    )
    # b1 never got a verdict (its rollout or gates failed before the judgement)
    assert canary_held("b2", hv, ["a1", "b1"]) == "canary b1 of b has no verdict (it failed before it was judged)"


def test_the_queries_judge_the_canary_against_the_models_other_hosts_over_the_window():
    q = canary_queries("node-1", "tiny", "model_tiny", ["node-1", "node.7"], 30)
    assert q["client_errors"] == (
        'sum(increase(haproxy_server_http_responses_total{proxy="model_tiny",server="node-1",code="5xx"}[30s]))'
    )
    assert q["p95_seconds"] == ('histogram_quantile(0.95, sum by (le) (rate(ftgateway_request_seconds_bucket'
                                '{model="tiny",instance="node-1",route!="/v1/models"}[30s])))')  # fmt: skip
    # the baseline leaves out every canary (a regular expression: the dot is escaped)
    assert 'instance!~"node\\\\-1|node\\\\.7"' in q["baseline_p95_seconds"]
    assert q["counter_resets"] == 'max(resets(nv_inference_request_success{job="triton",instance="node-1"}[30s]))'
    assert set(q) == {"client_requests", "client_errors", "retried_elsewhere", "host_requests", "host_errors",
                      "p95_seconds", "baseline_p95_seconds", "counter_resets", "down_scrapes", "continued",
                      "continuations_failed"}  # fmt: skip
    assert q["continued"] == ('sum(increase(ftgateway_continuations_total{model="tiny",instance="node-1",'
                              'outcome="continued"}[30s]))')  # fmt: skip


def answers(**values: float | None) -> list[dict]:
    """Registered uri results of the queries, as Prometheus answers an instant query."""
    out = []
    for key, value in values.items():
        result = [] if value is None else [{"metric": {}, "value": [1795770000.0, str(value)]}]
        out.append({"item": {"key": key, "value": "..."}, "status": 200, "json": {"data": {"result": result}}})
    return out


HEALTHY = {"client_requests": 400, "client_errors": 0, "retried_elsewhere": 0, "host_requests": 400,
           "host_errors": 0, "p95_seconds": 0.20, "baseline_p95_seconds": 0.18, "counter_resets": 0,
           "down_scrapes": 0}  # fmt: skip


def test_a_healthy_window_passes_with_its_measures():
    verdict = canary_verdict(answers(**HEALTHY), LIMITS, [], 30)
    assert verdict["passed"] is True, verdict
    assert verdict["reasons"] == []
    assert verdict["measures"]["client_error_ratio"] == 0.0
    assert verdict["measures"]["p95_ratio"] == pytest.approx(0.20 / 0.18)
    assert verdict["measures"]["tritonserver_restarts"] == 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"client_errors": 8},
            "client error ratio 0.0200 > 0.01 over 30 s (5xx that clients got through the load balancers: 8 of 400)",
        ),
        ({"p95_seconds": 0.5}, "p95 latency 0.500 s is 2.78 times the other hosts' 0.180 s > 1.5 over 30 s"),
        ({"counter_resets": 2}, "tritonserver restarts 2 > 0 over 30 s"),
        # a restart between two scrapes shows as a scrape that found it down, once
        ({"down_scrapes": 3}, "tritonserver restarts 1 > 0 over 30 s"),
    ],
)
def test_each_measure_over_its_threshold_fails_the_canary_with_value_threshold_and_window(change, reason):
    verdict = canary_verdict(answers(**{**HEALTHY, **change}), LIMITS, [], 30)
    assert verdict["passed"] is False
    assert verdict["reasons"] == [reason]


def test_the_hosts_own_errors_that_the_load_balancers_retried_do_not_fail_it():
    """After a tritonserver kill on the lab, its gateway answered 40 503s of 255 (16 %), HAProxy
    retried each on the other host, and its per-server count of 5xx to clients stayed 0."""
    window = {**HEALTHY, "host_requests": 255, "host_errors": 40, "retried_elsewhere": 40}
    verdict = canary_verdict(answers(**window), LIMITS, [], 30)
    assert verdict["passed"] is True, verdict
    assert verdict["measures"]["host_error_ratio"] == pytest.approx(40 / 255)
    assert verdict["measures"]["client_error_ratio"] == 0.0


def test_no_traffic_and_no_baseline_leave_those_measures_unjudged():
    window = {**HEALTHY, "client_requests": 0, "client_errors": None, "baseline_p95_seconds": None}
    verdict = canary_verdict(answers(**window), LIMITS, [], 30)
    assert verdict["passed"] is True
    assert verdict["measures"]["client_error_ratio"] is None
    assert verdict["measures"]["p95_ratio"] is None


def test_a_question_prometheus_did_not_answer_fails_the_canary():
    broken = answers(**HEALTHY)
    broken[0] = {"item": broken[0]["item"], "status": -1, "msg": "Connection refused"}
    verdict = canary_verdict(broken, LIMITS, [], 30, "Prometheus on mon-1")
    assert verdict["passed"] is False
    assert verdict["reasons"] == ["Prometheus on mon-1 did not answer client_requests (HTTP -1: Connection refused)"]


def test_golden_prompts_are_checked_whole_or_by_prefix_and_a_failure_skips_prometheus():
    def said(text: str, **item: str) -> dict:
        return {"item": {"prompt": "The fleet", **item}, "status": 200, "json": {"choices": [{"text": text}]}}

    results = [said(" serves a model", expected=" serves a model"), said(" serves a model", expected_prefix=" serves"),
               said(" thet the", expected=" serves a model"), said(" thet", expected_prefix=" serves"),
               {"item": {"prompt": "Hi", "expected": "x"}, "status": 503, "msg": "Status code was 503"}]  # fmt: skip
    failures = canary_golden_failures(results)
    assert failures == [
        "golden prompt 'The fleet': answered ' thet the', expected ' serves a model'",
        "golden prompt 'The fleet': answered ' thet', expected it to start with ' serves'",
        "golden prompt 'Hi': HTTP 503 Status code was 503",
    ]
    # the queries were skipped (each item skipped): the verdict is the golden prompts'
    skipped = [{"item": {"key": k}, "skipped": True} for k in HEALTHY]
    verdict = canary_verdict(skipped, LIMITS, failures, 30)
    assert verdict["passed"] is False
    assert verdict["reasons"] == failures
    assert verdict["measures"]["golden_prompt_failures"] == 3
    assert verdict["measures"]["client_requests"] is None


def test_a_canary_whose_restart_or_gates_failed_fails_first_with_that_reason():
    skipped = [{"item": {"key": k}, "skipped": True} for k in HEALTHY]
    why = "its restart or gates failed at gate | Wait for /v2/health/ready: Connection refused"
    verdict = canary_verdict(skipped, LIMITS, [], 30, gate_failure=why)
    assert verdict["passed"] is False
    assert verdict["reasons"] == [why]
    assert verdict["measures"]["gates_failed"] is True
    assert verdict["measures"]["golden_prompt_failures"] == 0
    # and none failed: the measures say so
    assert canary_verdict(skipped, LIMITS, [], 30)["measures"]["gates_failed"] is False


def answer(text: str, finish: str = "length", tokens: int = 16, **item) -> dict:
    """A registered uri result of one golden completion (the gateway's OpenAI shape)."""
    said = {"choices": [{"text": text, "finish_reason": finish}], "usage": {"completion_tokens": tokens}}
    return {"item": {"prompt": "The", **item}, "status": 200, "json": said}


def test_every_answer_must_be_text_that_goes_on_and_decodes_whatever_was_expected():
    assert canary_golden_failures([answer(" images are built once", max_tokens=16)]) == []
    assert canary_golden_failures([answer(" a short answer.", finish="stop", tokens=5)]) == []
    assert canary_golden_failures([answer("  ", finish="stop", tokens=1)]) == [
        "golden prompt 'The': answered nothing (stop)"
    ]
    assert canary_golden_failures([answer(".", finish="stop", tokens=1)]) == [
        "golden prompt 'The': ended at once (1 token of 16: '.')"
    ]
    # one token asked: ending after it is what was asked
    assert canary_golden_failures([answer(".", finish="stop", tokens=1, max_tokens=1)]) == []
    # the bad revision of the lab (scripts/lab-revision bad), its expected text matched or not asked
    garbage = " models\ufffdalue\ufffd once\ufffdalue"
    assert canary_golden_failures([answer(garbage)]) == [
        f"golden prompt 'The': answered {garbage!r}, with 3 replacement character(s) (U+FFFD)"
    ]
    assert canary_golden_failures([answer(garbage, expected=garbage)]) == [
        f"golden prompt 'The': answered {garbage!r}, with 3 replacement character(s) (U+FFFD)"
    ]
    # a character that max_tokens cut in two at the very end is no fault; one stopped there is
    assert canary_golden_failures([answer(" 안녕\ufffd")]) == []
    assert len(canary_golden_failures([answer(" 안녕\ufffd", finish="stop", tokens=4)])) == 1


def test_a_regular_expression_is_searched_in_the_answer():
    assert canary_golden_failures([answer(" images are built once", expected_regex=r"\bbuilt\b")]) == []
    assert canary_golden_failures([answer(" images are built once", expected_regex=r"^ images")]) == []
    assert canary_golden_failures([answer(" thet the", expected_regex=r"built|made")]) == [
        "golden prompt 'The': answered ' thet the', which 'built|made' does not match"
    ]


STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout
model_tiny,FRONTEND,,,0,2,,120,0,0
model_tiny,lab-node1,0,0,0,1,,41,0,0
model_tiny,lab-node2,0,0,1,2,,79,0,0
model_other,lab-node1,0,0,0,0,,5,0,0
"""


def test_the_sessions_of_a_server_are_summed_over_the_load_balancers_and_unknown_where_one_cannot_tell():
    two = [{"stdout": STAT, "rc": 0}, {"stdout": STAT.replace(",41,", ",3,"), "rc": 0}]
    assert haproxy_sessions(two, "model_tiny", "lab-node1") == 44
    assert haproxy_sessions(two, "model_other", "lab-node1") == 10
    assert (
        haproxy_sessions([*two, {"stdout": "", "rc": 1, "stderr": "No such file"}], "model_tiny", "lab-node1") is None
    )
    assert haproxy_sessions(two, "model_tiny", "lab-node3") is None


def test_the_verdict_says_how_many_requests_the_new_revision_answered():
    skipped = [{"item": {"key": k}, "skipped": True} for k in HEALTHY]
    failed = ["golden prompt 'The': answered nothing (stop)"]
    assert canary_verdict(skipped, LIMITS, failed, 30, sessions=[41, 41])["measures"]["new_revision_requests"] == 0
    assert canary_verdict(answers(**HEALTHY), LIMITS, [], 30, sessions=["41", 160])["measures"][
        "new_revision_requests"] == 119  # fmt: skip
    for unknown in (None, [None, 3], [41, 3], [41]):
        assert (
            canary_verdict(skipped, LIMITS, failed, 30, sessions=unknown)["measures"]["new_revision_requests"] is None
        )
