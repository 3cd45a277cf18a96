"""ftfleet: the fleet's playbooks through ansible-runner, with a live view and a report.

    ftfleet plan   [--diffs]     check mode with diff: what would change, per host and stage
    ftfleet apply                site.yml: live view per host, then what changed
    ftfleet status [--interval]  each host's model, commit, tp, GPUs, image, unit, health, traffic
    ftfleet report [--minutes]   the last hour from Prometheus (monitoring stage): a PNG per model
                                 of requests/s, p95 latency, error ratio, GPU utilization; and the
                                 alerts that fire
    ftfleet bench  [options]     the serving benchmark per layer (HAProxy, gateway, Triton,
                                 transformers in one process); its own options: ftfleet bench --help

Options of plan, apply and status (after the command): -i INVENTORY (default: ansible.cfg's, the lab),
-l/--limit, -t/--tags, -e/--extra-vars (repeatable), --runs-dir. Every run leaves
runs/<time>-<command>/ with ansible-runner's artifacts, report.json and summary.md.

Exit codes: 0 success; 1 Ansible could not run (bad options, syntax, inventory); 2 a task failed
on some host; 4 some host was unreachable; 64 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ftfleet import rollout, view
from ftfleet.events import ROOT, Run, verdict_said

EXIT = {"ok": 0, "error": 1, "failed": 2, "unreachable": 4, "usage": 64}


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 64, apart from "a host failed" (2)
        self.print_usage(sys.stderr)
        self.exit(EXIT["usage"], f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-i", "--inventory", help="inventory path (default: ansible.cfg's, inventories/lab)")
    common.add_argument("-l", "--limit", help="hosts or groups to run on (ansible-playbook --limit)")
    common.add_argument("-t", "--tags", help="only these tags (ansible-playbook --tags)")
    common.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="extra variables, key=value or JSON or @file (repeatable)")  # fmt: skip
    common.add_argument("--runs-dir", type=Path, default=ROOT / "runs", help="where runs are recorded (./runs)")
    top = Parser(prog="ftfleet", description=__doc__.split("\n\n")[0],
                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    plan = commands.add_parser("plan", parents=[common], help="what site.yml would change (check mode, diff)")
    plan.add_argument("--diffs", action="store_true", help="print each change's diff too")
    commands.add_parser("apply", parents=[common], help="run site.yml with a live view, then report what changed")
    status = commands.add_parser("status", parents=[common], help="each host's serving state and traffic")
    status.add_argument("--interval", type=float, default=2.0, help="seconds between the two metric samples")
    report = commands.add_parser("report", help="the fleet's last hour from Prometheus: a picture, the firing alerts")
    report.add_argument("-i", "--inventory", help="inventory path (default: ansible.cfg's, inventories/lab)")
    report.add_argument("--prometheus", metavar="URL",
                        help="Prometheus's URL (default: the inventory's first monitoring host)")  # fmt: skip
    report.add_argument("--minutes", type=float, default=60.0, help="how far back (60)")
    report.add_argument("--step", type=float, default=15.0, help="seconds between points (15)")
    report.add_argument("--runs-dir", type=Path, default=ROOT / "runs", help="where runs are recorded (./runs)")
    bench = commands.add_parser("bench", add_help=False, help="the serving benchmark: each layer's latency and "
                                "throughput (ftfleet bench --help)")  # fmt: skip
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    return top


def cmdline(args: argparse.Namespace, *more: str) -> list[str]:
    words = [*more]
    if args.limit:
        words += ["--limit", args.limit]
    if args.tags:
        words += ["--tags", args.tags]
    for extra in args.extra_vars:
        words += ["-e", extra]
    return words


def callback_path() -> dict[str, str]:
    """ANSIBLE_CALLBACK_PLUGINS with this project's callback_plugins/ first: ansible-runner sets the
    variable to its own folder, which replaces ansible.cfg's callback_plugins path, so that
    ansible.cfg's callbacks_enabled would name a plugin Ansible cannot find (fleet_warm)."""
    mine = str(ROOT / "callback_plugins")
    theirs = os.environ.get("ANSIBLE_CALLBACK_PLUGINS", "")
    return {"ANSIBLE_CALLBACK_PLUGINS": os.pathsep.join(filter(None, (mine, theirs)))}


def execute(
    args: argparse.Namespace, playbook: str, words: list[str], title: str, console: Console
) -> tuple[Run, Any, Path]:
    """Run a playbook through ansible-runner, showing the live view; returns the run, the runner
    and the run's directory."""
    import ansible_runner  # noqa: PLC0415 - imported here so that --help answers fast

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = (args.runs_dir / f"{stamp}-{args.command}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    run = Run()
    env = {"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", **callback_path(),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    kwargs: dict[str, Any] = {"private_data_dir": str(run_dir), "project_dir": str(ROOT), "playbook": playbook,
                              "cmdline": " ".join(map(_quote, words)), "quiet": True, "event_handler": run.handle,
                              "envvars": env, "ident": "ansible",
                              # ansible.cfg's fact cache, kept between runs (ansible-runner would
                              # start an empty one in each run's directory: facts gathered again)
                              "fact_cache": str(ROOT / ".cache" / "facts")}  # fmt: skip
    if args.inventory:
        kwargs["inventory"] = str(Path(args.inventory).resolve())
    thread, runner = ansible_runner.run_async(**kwargs)
    with Live(view.live(run, title), console=console, refresh_per_second=4, transient=False) as screen:
        while thread.is_alive():
            screen.update(view.live(run, title))
            time.sleep(0.25)
        thread.join()
        screen.update(view.live(run, title))
    return run, runner, run_dir


def _quote(word: str) -> str:
    import shlex  # noqa: PLC0415

    return shlex.quote(word)


def outcome(run: Run, runner: Any) -> str:
    if any(h.unreachable for h in run.hosts.values()):
        return "unreachable"
    if run.failures:
        return "failed"
    return "ok" if runner.rc == 0 else "error"


def finish(run: Run, runner: Any, run_dir: Path, console: Console, **about: Any) -> int:
    """Print what changed, write report.json and summary.md, and give the exit code."""
    result = outcome(run, runner)
    report = run.report(result=result, rc=runner.rc, run_dir=str(run_dir), **about)
    if result == "error":  # Ansible itself stopped: show why (its last lines)
        tail = Path(runner.stdout.name).read_text().strip().splitlines()[-15:] if runner.stdout else []
        report["ansible_output"] = tail
        console.print("\n".join(tail), style="red", markup=False, highlight=False)
    (run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (run_dir / "summary.md").write_text(markdown(report))
    for note in run.notes:
        console.print(f"{note['host']} ({note['stage']}): {note['message']}", markup=False, highlight=False)
    console.print(view.per_stage(run))
    if run.changes or run.failures:
        console.print(view.changes(run))
    if run.canaries:
        console.print(view.canaries(run))
    if about.get("placement"):
        console.print(view.describe_placement(about["placement"]), markup=False, highlight=False)
    if about.get("rollout"):
        console.print(rollout.describe(about["rollout"]), markup=False, highlight=False)
    total = sum(len(r) and sum(r.values()) for r in report["changed"].values())
    console.print(f"{about.get('command')}: {result}, {total} changed task(s) in {report['seconds']} s; "
                  f"report: {run_dir / 'report.json'}, {run_dir / 'summary.md'}")  # fmt: skip
    return EXIT[result]


def planned_rollout(args: argparse.Namespace, run: Run) -> dict[str, Any]:
    """The serve stage's batches for the hosts whose restart the plan found, and how long they
    would take by the last applies' restart times (ftfleet/rollout.py)."""
    hosts = list(run.batched)
    # ansible-runner runs ansible-playbook in the project (ROOT): a relative -e @file is read there
    serial = rollout.serial_of(args.extra_vars, ROOT)
    return rollout.plan(hosts, set(run.restarts), serial, rollout.restart_seconds(args.runs_dir))


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# ftfleet {report['command']}: {report['result']}", "",
             f"{report['seconds']} s, exit {EXIT[report['result']]}; ansible-runner artifacts in "
             f"`{report['run_dir']}/artifacts/ansible/`.", "", "## Changed tasks per host and stage", ""]  # fmt: skip
    stages = list(dict.fromkeys(s for row in report["changed"].values() for s in row))
    lines += ["| host | " + " | ".join(stages) + " |", "|---|" + "---|" * len(stages)]
    lines += [f"| {h} | " + " | ".join(str(r.get(s, "-")) for s in stages) + " |" for h, r in report["changed"].items()]
    for title, steps in (("Changes", report["changes"]), ("Failures", report["failures"])):
        if steps:
            lines += ["", f"## {title}", "", "| host | stage | role | task | seconds |", "|---|---|---|---|---|"]
            for step in steps:
                what = step["task"] + (f": {step['message']}" if step.get("message") else "")
                lines.append(f"| {step['host']} | {step['stage']} | {step['role']} | {what} | {step['duration']} |")
    if report.get("canary"):
        lines += ["", "## Canary verdicts", "", "| host | verdict | what it saw |", "|---|---|---|"]
        for host, verdict in sorted(report["canary"].items()):
            saw = verdict_said(verdict["verdict"]).replace("|", "\\|")
            lines.append(f"| {host} | {'passed' if verdict['passed'] else 'FAILED, rolled back'} | {saw} |")
    return "\n".join(lines) + "\n"


TLS_RENEW_DAYS = 30  # a certificate with fewer days left is shown as one to renew


def status_table(run_dir: Path) -> tuple[Table, list[dict[str, Any]]]:
    """The fleet_status_report facts the status play published, from the run's events."""
    rows = []
    for path in sorted((run_dir / "artifacts" / "ansible" / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        facts = ((event.get("event_data") or {}).get("res") or {}).get("ansible_facts") or {}
        if event.get("event") == "runner_on_ok" and "fleet_status_report" in facts:
            rows.append({"host": event["event_data"]["host"], **facts["fleet_status_report"]})
    machine_free(rows)
    table = Table(title="Fleet status", title_justify="left")
    for column in ("host", "model", "commit", "tp", "GPUs", "free GPUs", "image", "unit", "health", "req/s",
                   "latency ms", "TLS days"):  # fmt: skip
        table.add_column(column)
    for row in sorted(rows, key=lambda r: r["host"]):
        unit = f"{row['unit']}/{row.get('enabled', '')}" if row.get("unit") else ""
        table.add_row(row["host"], row.get("model", ""), (row.get("commit") or "")[:12], str(row.get("tp", "")),
                      ",".join(map(str, row.get("gpus") or [])), free_gpus(row), row.get("image", ""), unit,
                      row.get("health", ""),
                      "-" if row.get("requests_per_second") is None else str(row["requests_per_second"]),
                      "-" if row.get("latency_ms") is None else str(row["latency_ms"]),
                      tls_days(row.get("tls_days_left")))  # fmt: skip
    return table, rows


def machine_free(rows: list[dict[str, Any]]) -> None:
    """Each row's free GPUs on its machine: several models on one machine (fleet_machine) each
    report the GPUs their own model leaves; free are those that none of them holds."""
    held: dict[str, set[int]] = {}
    for row in rows:
        held.setdefault(row.get("machine") or row["host"], set()).update(row.get("gpus") or [])
    for row in rows:
        if row.get("gpus_free") is not None:
            gpus = set(row["gpus_free"]) | set(row.get("gpus") or [])
            row["gpus_free"] = sorted(gpus - held[row.get("machine") or row["host"]])


def free_gpus(row: dict[str, Any]) -> str:
    """The host's GPUs that no model holds, "of" its count: "2,3 of 4", "none of 8", "" unknown."""
    if row.get("gpus_total") is None:
        return ""
    free = row.get("gpus_free") or []
    return f"{','.join(map(str, free)) if free else 'none'} of {row['gpus_total']}"


def tls_days(days: Any) -> str:
    """A certificate's days left, marked when it is time to renew (under TLS_RENEW_DAYS)."""
    if days is None or days == "":
        return "-"
    days = int(days)
    if days < 0:
        return f"[bold red]expired {-days} d ago[/]"
    return f"[bold red]{days} (renew)[/]" if days < TLS_RENEW_DAYS else str(days)


def fleet_report(args: argparse.Namespace, console: Console) -> int:
    """runs/<time>-report/: fleet.png, report.json; the firing alerts printed."""
    from ftfleet import report  # noqa: PLC0415 - matplotlib only for this command

    if args.minutes <= 0 or args.step <= 0:
        console.print("[red]ftfleet report: --minutes and --step must be positive[/]")
        return EXIT["usage"]
    try:
        url = args.prometheus or report.prometheus_url(args.inventory)
        data = report.collect(url, args.minutes, args.step)
    except report.ReportError as err:
        console.print(f"[red]ftfleet report: {err}[/]", markup=True, highlight=False)
        return EXIT["error"]
    run_dir = args.runs_dir / (datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + "-report")
    run_dir.mkdir(parents=True, exist_ok=True)
    report.draw(data, run_dir / "fleet.png")
    (run_dir / "report.json").write_text(json.dumps(data, indent=1) + "\n")
    table = Table(title=f"Now, from {url}", title_justify="left")
    for column in ("model", *(p["title"] for p in data["panels"])):
        table.add_column(column)
    models = sorted({m for p in data["panels"] for m in p["series"]})
    for model in models:
        cells = []
        for p in data["panels"]:
            value = report.last(p["series"].get(model, []))
            cells.append("-" if value is None else f"{value * p['scale']:.3g} {p['unit']}")
        table.add_row(model, *cells)
    console.print(table)
    if data["alerts"]:
        alerts = Table(title="Firing alerts", title_justify="left")
        for column in ("alert", "severity", "where", "since", "summary"):
            alerts.add_column(column)
        for a in data["alerts"]:
            labels = a["labels"]
            where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity"))
            alerts.add_row(labels["alertname"], labels.get("severity", ""), where, a.get("activeAt", "")[:19],
                           a.get("annotations", {}).get("summary", ""))  # fmt: skip
        console.print(alerts)
    else:
        console.print("No alert fires.")
    console.print(f"Picture: {run_dir / 'fleet.png'}")
    return EXIT["ok"]


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args, rest = top.parse_known_args(argv)
    if rest and args.command != "bench":  # only bench takes options of its own (ftfleet/bench.py's)
        top.error(f"unrecognized arguments: {' '.join(rest)}")
    console = Console(soft_wrap=True)  # lines as they are: notes and diffs stay greppable in logs
    if args.command == "plan":
        run, runner, run_dir = execute(args, "site.yml", cmdline(args, "--check", "--diff"), "ftfleet plan", console)
        code = finish(run, runner, run_dir, console, command="plan", rollout=planned_rollout(args, run),
                      placement=view.placement(run.diffs))  # fmt: skip
        if args.diffs:
            for entry in run.diffs:
                console.rule(f"{entry['host']} {entry['stage']}: {entry['task']}")
                console.print(view.unified(entry), markup=False, highlight=False)
        return code
    if args.command == "apply":
        run, runner, run_dir = execute(args, "site.yml", cmdline(args), "ftfleet apply", console)
        return finish(run, runner, run_dir, console, command="apply")
    if args.command == "bench":
        from ftfleet import bench  # noqa: PLC0415 - numpy and the clients only for this command

        return bench.main(rest + args.bench_args)
    if args.command == "report":
        return fleet_report(args, console)
    words = cmdline(args, "-e", json.dumps({"fleet_status_interval": args.interval}))
    run, runner, run_dir = execute(args, "playbooks/status.yml", words, "ftfleet status", console)
    table, rows = status_table(run_dir)
    console.print(table)
    code = finish(run, runner, run_dir, console, command="status", status=rows)
    return code


if __name__ == "__main__":
    sys.exit(main())
