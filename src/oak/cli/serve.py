"""``oak serve`` / ``submit`` / ``status`` / ``cancel`` / ``logs`` / ``explain``: the scheduler as a service (docs/jobs.md)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from oak.cli.common import app, console, err_console, fail, typed_options

RunDir = Annotated[
    Path,
    typer.Option(
        envvar="OAK_RUN_DIR", help="The service's run directory (state.sqlite, oak.sock, jobs/); or set OAK_RUN_DIR."
    ),
]


def _listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8470")
    return host.strip("[]"), int(port)


@app.command("serve")
def serve(
    run_dir: RunDir,
    policy: Annotated[str, typer.Option(help="Policy: oak, sia, pollux, ..., or FILE.py:NAME.")] = "oak",
    gpus: Annotated[str | None, typer.Option(help="'auto' (every visible CUDA GPU) or a count.")] = None,
    cpu_slots: Annotated[int | None, typer.Option(help="Treat N CPU worker processes as the devices.")] = None,
    round_seconds: Annotated[float, typer.Option(help="Seconds per scheduling round.")] = 60.0,
    seed: Annotated[int, typer.Option(help="Seed of the failure stream and the packaged workers.")] = 0,
    failure_rate: Annotated[float, typer.Option(help="λ: injected SIGKILL probability per round per job.")] = 0.0,
    profile_type: Annotated[
        str | None, typer.Option(help="Catalog GPU type whose goodput model scores allocations (cpu: aws).")
    ] = None,
    backend: Annotated[str, typer.Option(help="local (processes), ray or slurm.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray address (default: start a local Ray).")] = None,
    cluster_from: Annotated[
        str | None,
        typer.Option(help="slurm|ray: plan over the running cluster's nodes (jobs may span nodes); as --backend."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(help="Also serve HTTP on HOST:PORT (GET /metrics, POST /v1/request), token in RUN_DIR/token."),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="With --listen: serve HTTPS with this PEM certificate chain (and --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="With --tls-cert: the PEM private key.")] = None,
    insecure_http: Annotated[
        bool,
        typer.Option(help="Allow plain HTTP on an address other machines can reach (the token travels in clear)."),
    ] = False,
    token_file: Annotated[
        Path | None,
        typer.Option(help="With --listen: the bearer token (a 0600 file; default: kept in RUN_DIR/token)."),
    ] = None,
    stop_seconds: Annotated[float, typer.Option(help="Grace period of a stop (SIGTERM) before SIGKILL.")] = 60.0,
    max_retries: Annotated[int, typer.Option(help="Failures in a row without progress before a job fails.")] = 3,
    stall_seconds: Annotated[float, typer.Option(help="Kill as failed a job whose status stops updating.")] = 180.0,
) -> None:
    """Run the scheduler as a service: jobs come with `oak submit`, leave with `oak cancel`; SIGTERM or Ctrl-C
    stops every job with a checkpoint; the same command resumes (also after SIGKILL)."""
    from oak.catalog import Catalog
    from oak.cli.run import check_runtime_options, make_executor, profile_type_of
    from oak.policies import make_policy
    from oak.runtime.scheduler import RuntimeOptions
    from oak.service.protocol import Listeners
    from oak.service.scheduler import Service

    check_runtime_options(
        backend,
        gpus,
        cpu_slots,
        failure_rate,
        seed,
        max_retries,
        round_seconds=round_seconds,
        stop_seconds=stop_seconds,
        stall_seconds=stall_seconds,
    )
    addr = _listen_address(listen) if listen is not None else None
    if (tls_cert is None) != (tls_key is None):
        fail("give --tls-cert and --tls-key together")
    if addr is None and (tls_cert is not None or insecure_http or token_file is not None):
        fail("--tls-cert, --tls-key, --insecure-http and --token-file apply to --listen HOST:PORT")
    tls = (tls_cert, tls_key) if tls_cert is not None and tls_key is not None else None
    from oak.io_util import output_dir_problem

    problem = output_dir_problem(run_dir)  # the scheduler writes its state there: refused before any start
    if problem is not None:
        fail(f"--run-dir {run_dir}: {problem}")
    pol = make_policy(policy, seed=seed)
    catalog = Catalog.load()
    executor, devices, kind, nodes = make_executor(backend, gpus, cpu_slots, address, Path(run_dir), cluster_from)
    ptype = profile_type_of(profile_type, kind, catalog)
    opts = RuntimeOptions(
        nodes=nodes,
        devices=devices,
        device_kind=kind,
        profile_type=ptype,
        failure_rate=failure_rate,
        round_s=round_seconds,
        seed=seed,
        stop_timeout_s=stop_seconds,
        stall_s=stall_seconds,
        max_retries=max_retries,
    )

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    fresh = not (Path(run_dir) / "state.sqlite").exists()
    service = Service(pol, run_dir, opts, executor=executor, catalog=catalog, log=log)
    try:
        service.scheduler.check_same_run()  # another run there: refused before it listens or says it serves
        listeners = Listeners(Path(run_dir), service.request, addr, tls, insecure_http, token_file)
    except Exception:
        service.scheduler.store.close()
        if fresh:  # a start that failed (port in use, another service, bad certificate) leaves no run behind
            for f in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm"):
                (Path(run_dir) / f).unlink(missing_ok=True)
        raise
    scheme = "HTTPS" if tls is not None else "HTTP"
    where = f"; {scheme} on {listeners.address[0]}:{listeners.address[1]}" if listeners.address else ""
    log(
        json.dumps(
            {
                "event": "serve",
                "run_dir": str(run_dir),
                "devices": devices,
                "kind": kind,
                "policy": pol.name,
                "socket": str(Path(run_dir) / "oak.sock"),
                "listen": listen,
            }
        )
    )
    err_console.print(
        f"oak serve: {devices} {kind} device(s), policy {pol.name}, socket {Path(run_dir) / 'oak.sock'}{where}"
    )
    try:
        service.run()
    finally:
        listeners.close()
    err_console.print("oak serve: stopped; every running job was stopped with a checkpoint")


def _call(run_dir: Path, op: str, **args: Any) -> dict[str, Any]:
    from oak.service.protocol import call

    reply = call(run_dir, op, **args)
    if not reply.get("ok"):
        fail(str(reply.get("error", "refused")))
    return reply


@app.command("submit")
def submit(
    run_dir: RunDir,
    jobs_file: Annotated[str | None, typer.Argument(help="Jobs file (YAML); or --name NAME -- CMD ...")] = None,
    name: Annotated[
        str | None, typer.Option(help="Submit one command job of this name (the command after --).")
    ] = None,
    min_gpus: Annotated[int, typer.Option(help="With --name: fewest devices.")] = 1,
    max_gpus: Annotated[int | None, typer.Option(help="With --name: most devices (default: min).")] = None,
    target_steps: Annotated[int | None, typer.Option(help="With --name: steps to completion, if known.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="With --name: global batch (samples).")] = None,
    command: Annotated[list[str] | None, typer.Argument(help="With --name: the command and its arguments.")] = None,
) -> None:
    """Submit jobs to a running `oak serve`: every job of the file is accepted, or none (the error says why)."""
    if name is not None:
        argv = ([jobs_file] if jobs_file is not None else []) + list(command or [])  # as typed: no path rewriting
        if not argv:
            fail("--name NAME needs a command after --, e.g. oak submit --run-dir D --name a -- python train.py")
        if argv[0].lower().endswith((".yaml", ".yml")) and Path(argv[0]).is_file():
            fail(
                f"--name {name}: the command {argv[0]!r} is a jobs file, not a program; submit the file without "
                f"--name (oak submit {argv[0]}), or give the program that reads it after --"
            )
        entry: dict[str, Any] = {
            "name": name,
            "command": argv,
            "min_gpus": min_gpus,
            "max_gpus": min_gpus if max_gpus is None else max_gpus,
        }
        if target_steps is not None:
            entry["target_steps"] = target_steps
        if batch_size is not None:
            entry["batch_size"] = batch_size

        text, source = _dump_quoted({"jobs": [entry]}), f"--name {name}"
    else:
        if jobs_file is None:
            fail("give a jobs file, or --name NAME -- CMD ...")
        assert jobs_file is not None
        if command:
            fail(f"unexpected arguments after the jobs file: {command!r} (a command goes with --name NAME -- CMD)")
        given = [
            opt
            for opt, value in (
                ("--min-gpus", None if min_gpus == 1 else min_gpus),
                ("--max-gpus", max_gpus),
                ("--target-steps", target_steps),
                ("--batch-size", batch_size),
            )
            if value is not None
        ]
        if given:  # they were ignored: a jobs file gives each job's own
            fail(f"{', '.join(given)}: for one job given with --name NAME -- CMD; a jobs file sets them per job")
        try:
            text = Path(jobs_file).read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"{jobs_file}: cannot read the jobs file ({exc.strerror or exc})")
        except UnicodeDecodeError as exc:
            fail(f"{jobs_file}: not UTF-8 text ({exc.reason} at byte {exc.start})")
        source = str(jobs_file)
    # a command job without a workdir runs where it was submitted from, as with sbatch
    from oak.service.protocol import call

    reply = call(run_dir, "submit", text=text, source=source, cwd=os.getcwd())  # no server: an input error
    if not reply.get("ok"):
        error = str(reply.get("error", "refused"))
        if name is not None:  # say it in the options typed, not in the lines of the YAML made from them
            error = re.sub(
                rf"^--name {re.escape(name)}:\d+: jobs\[0\]\.(\w+)",
                lambda m: f"--name {name}: " + ("the command" if m[1] == "command" else "--" + m[1].replace("_", "-")),
                error,
            )
            error = re.sub(rf"^--name {re.escape(name)}:\d+: ", f"--name {name}: ", error)
        fail(error)
    console.print(f"submitted {', '.join(reply['submitted'])}")


@app.command("cancel")
def cancel(run_dir: RunDir, name: Annotated[str, typer.Argument(help="The job to cancel.")]) -> None:
    """Cancel a job: it is stopped with a checkpoint (SIGTERM, then SIGKILL after the grace period). Returns at
    once; the job keeps its devices until it has exited (``oak status`` shows them)."""
    _call(run_dir, "cancel", name=name)
    console.print(f"cancelled {name}: it checkpoints and exits (SIGKILL after the service's --stop-seconds)")


@app.command("retry")
def retry(run_dir: RunDir, name: Annotated[str, typer.Argument(help="The failed or cancelled job.")]) -> None:
    """Queue a failed or cancelled job again: it resumes from its newest checkpoint with a fresh retry count."""
    _call(run_dir, "retry", name=name)
    console.print(f"queued {name} again: it resumes from its newest checkpoint")


def _status(run_dir: Path) -> tuple[dict[str, Any], bool]:
    """The service's published state, or — when none runs — the state last committed to state.sqlite."""
    from oak.service.protocol import NoServer, call

    try:
        reply = call(run_dir, "status", timeout_s=30.0)
        if reply.get("ok"):
            return reply, True
    except NoServer:
        pass
    return _stored_status(run_dir), False


def _dump_quoted(doc: Any) -> str:
    """``doc`` as YAML with every string quoted: PyYAML leaves a string plain where YAML 1.1 would read it back as
    a string, but the jobs-file reader is YAML 1.2's (``0o7``, plain, would come back as the number 7)."""
    import yaml

    class Quoted(yaml.SafeDumper):
        pass

    Quoted.add_representer(str, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"'))
    return str(yaml.dump(doc, Dumper=Quoted, sort_keys=False))


def _recorded_jobs(run: Any) -> dict[str, Any]:
    """An ``oak run``'s jobs from its recorded settings (for their totals); {} where they cannot be read (a run
    begun by an older oak): the status is shown without them."""
    from oak.runtime.jobs_file import job_from_dict

    try:
        return {d["name"]: job_from_dict(d) for d in run.get("jobs") or []} if isinstance(run, dict) else {}
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}


def _holds_no_run(db: Path) -> bool:
    """Whether ``db`` surely holds no run: empty, or a database without a run's settings (read without writing
    to it; False where that cannot be told, e.g. a write-ahead log a reader may not open)."""
    import sqlite3

    if db.stat().st_size == 0 and not db.with_name(db.name + "-wal").is_file():
        return True
    try:
        con = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
        try:
            tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return "meta" not in tables or con.execute("SELECT count(*) FROM meta").fetchone()[0] == 0
        finally:
            con.close()
    except sqlite3.Error:
        return False


def _stored_status(run_dir: Path) -> dict[str, Any]:
    from oak.runtime.jobs_file import job_from_dict
    from oak.runtime.store import RunStore, UnreadableRunState

    db = run_dir / "state.sqlite"
    if not db.is_file():
        fail(f"{run_dir}: not a run directory of oak serve or oak run (no state.sqlite)")
    import sqlite3

    lost = f"{db}: holds no run: the run's state was deleted, emptied or replaced while no scheduler ran"
    # before opening it as a scheduler would: that lays a new, empty run's tables in what is there
    if _holds_no_run(db) and (db.stat().st_size == 0 or (run_dir / "run.json").is_file()):
        fail(lost)
    try:
        store = RunStore.for_reading(db)
        try:
            meta = store.meta()
            if not meta and (run_dir / "run.json").is_file():
                fail(lost)
            specs = {d["name"]: job_from_dict(d) for d in store.submissions()}
            recs = store.jobs()
            run = meta.get("run")
            # an oak run's jobs (its file's, with their totals) are in its recorded settings, not submissions
            known = _recorded_jobs(run)
        finally:
            store.close()
    except UnreadableRunState as exc:
        fail(str(exc))
    except (sqlite3.Error, ValueError, TypeError, KeyError, AttributeError) as exc:  # damaged or hand-edited
        fail(f"{db}: unreadable ({type(exc).__name__}: {exc})")
    # oak serve's jobs in submission order; an oak run's (no submissions) in its records' order
    names = list(specs) if specs else sorted(recs)
    rows = []
    for name in names:
        r, j = recs.get(name), specs.get(name) or known.get(name)
        if r is None:
            continue
        total = ((j.target_steps if j is not None else 0) or r.total_steps) or None
        rows.append(  # as committed: a job recorded as running may still run (its processes outlive a crash)
            {
                "name": name,
                "state": r.state,
                "devices": list(r.devices),
                "pids": list(r.pids),
                "restarts": r.restarts,
                "failures": r.failures,
                "step": r.step,
                "total_steps": total,
                "t_progress_s": round(r.t_progress_s, 3),
                "t_ckpt_s": round(r.t_ckpt_s, 3),
                "t_queue_s": round(r.t_queue_s, 3),
                "submitted_s": round(j.submit_s, 3) if j is not None else None,
                "finish_s": r.finish_s,
                "lost_steps": r.lost_steps,
                "reason": r.gave_up,
                "why": "" if r.over else r.why,  # the last round's, until the job is over
                "why_code": "" if r.over else r.why_code,
                "kind": None if j is None else ("command" if j.is_command else j.model),
                "phase": r.phase,
                "history": r.history,
            }
        )
    return {"jobs": rows, "started": False}


def _table(state: dict[str, Any], live: bool, run_dir: Path) -> Table:
    head = f"{run_dir}: " + (
        f"t = {state.get('time_s', 0):,.0f} s · {state.get('devices')} {state.get('device_kind')} device(s) · "
        f"{state.get('policy')} · {state.get('rounds')} round(s)"
        if live
        else "no service running; state as last committed (jobs shown running may still run)"
    )
    if live and state.get("policy_error"):
        head += f"\nlast round not decided: {state['policy_error']} (jobs keep their devices)"
    t = Table(title=head, title_justify="left")
    for col, just in (
        ("job", "left"),
        ("state", "left"),
        ("devices", "left"),
        ("step", "right"),
        ("restarts", "right"),
        ("failures", "right"),
        ("T_progress s", "right"),
        ("T_ckpt s", "right"),
        ("T_queue s", "right"),
        ("lost steps", "right"),
        ("why", "left"),
    ):
        # the state is what a reader looks for: never squeezed or wrapped on a narrow terminal or in a pipe (80 columns)
        wide = {"min_width": len("restoring"), "no_wrap": True} if col == "state" else {}
        t.add_column(col, justify=just, **wide)  # type: ignore[arg-type]
    colour = {
        "running": "green",
        "restoring": "yellow",
        "queued": "cyan",
        "done": "bold",
        "failed": "red",
        "cancelled": "dim",
    }
    for r in state["jobs"]:
        total = f"/{r['total_steps']}" if r.get("total_steps") else ""
        t.add_row(
            escape(r["name"]),
            f"[{colour.get(r['state'], 'white')}]{r['state']}[/]",
            ",".join(str(d) for d in r["devices"]) or "-",
            f"{r['step']}{total}",
            str(r["restarts"]),
            str(r["failures"]),
            f"{r['t_progress_s']:,.1f}",
            f"{r['t_ckpt_s']:,.1f}",
            f"{r['t_queue_s']:,.1f}",
            str(r["lost_steps"]),
            escape(str(r.get("why") or r.get("reason") or "")),
        )
    return t


def _only(state: dict[str, Any], name: str | None) -> dict[str, Any]:
    """``state`` with only job ``name`` (all jobs when None); an unknown name is an input error."""
    if name is None:
        return state
    rows = [r for r in state["jobs"] if r["name"] == name]
    if not rows:
        known = ", ".join(r["name"] for r in state["jobs"][:20]) or "none"
        more = f" and {len(state['jobs']) - 20} more" if len(state["jobs"]) > 20 else ""
        fail(f"no job {name!r} in this run (jobs: {known}{more})")
    return {**state, "jobs": rows}


@app.command("status")
def status(
    ctx: typer.Context,
    run_dir: RunDir,
    name: Annotated[str | None, typer.Argument(help="Only this job.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help='Print {"jobs": [...]} as JSON.')] = False,
    watch: Annotated[bool, typer.Option(help="Redraw every --interval seconds until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(help="--watch: seconds between redraws.")] = 2.0,
) -> None:
    """The jobs of a service's run directory (or one of them): state, devices, steps, restarts and the measured
    times."""
    if not (math.isfinite(interval) and interval > 0):
        fail(f"--interval {interval!r}: expected a positive number of seconds")
    if json_out and watch:
        fail("--json prints the state once; --watch redraws the table: give one of them")
    if not watch and typed_options(ctx, ["interval"]):
        fail(f"--interval {interval:g}: the time between --watch's redraws; add --watch")
    if json_out:
        state, live = _status(run_dir)
        print(json.dumps({"jobs": _only(state, name)["jobs"], "live": live}, indent=1))
        return
    if not watch:
        state, live = _status(run_dir)
        console.print(_table(_only(state, name), live, run_dir))
        return
    if not console.is_terminal:  # a pipe or a file: one table per interval, each printed in full
        try:
            while True:
                state, live = _status(run_dir)
                console.print(_table(_only(state, name), live, run_dir))
                sys.stdout.flush()
                time.sleep(interval)
        except KeyboardInterrupt:
            return
    from rich.live import Live

    with Live(console=console, auto_refresh=False) as view:
        try:
            while True:
                state, live = _status(run_dir)
                view.update(_table(_only(state, name), live, run_dir), refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            pass


@app.command("logs")
def logs(
    run_dir: RunDir,
    name: Annotated[str, typer.Argument(help="The job.")],
    rank: Annotated[int, typer.Option(help="The rank whose log to show.")] = 0,
    lines: Annotated[int, typer.Option(help="Show the last N lines (0: all).")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing what is appended.")] = False,
) -> None:
    """A job's rank log (every incarnation, each headed by a '=== … start' line). With ``-f``, what is appended,
    until the job is over (done, failed or cancelled) or Ctrl-C."""
    from oak.runtime.jobs_file import _NAME

    if not _NAME.fullmatch(name):
        fail(f"{name!r}: not a job name")
    if lines < 0:
        fail(f"--lines {lines}: expected a number of lines >= 0 (0: all)")
    if rank < 0:
        fail(f"--rank {rank}: expected a rank >= 0")
    state, _ = _status(run_dir)
    row = _only(state, name)["jobs"][0]  # an unknown job is an input error naming the run's jobs
    path = run_dir / "jobs" / name / f"rank{rank}.log"
    over = _log_over(run_dir, name)
    if follow and not path.is_file() and not over():
        err_console.print(f"job {name!r} is {row['state']}: waiting for it to start (Ctrl-C to stop)")
        try:
            while not path.is_file() and not over():
                time.sleep(0.5)
        except KeyboardInterrupt:
            return
    if not path.is_file():
        have = (
            sorted(p.name for p in (run_dir / "jobs" / name).glob("rank*.log"))
            if (run_dir / "jobs" / name).is_dir()
            else []
        )
        fail(
            f"{path}: no such log"
            + (
                f" (this job has {', '.join(have)})"
                if have
                else f" (job {name!r} is {row['state']}: it has not started)"
            )
        )
    with open(path, "rb") as fh:
        data = fh.read()
        text = data.decode("utf-8", errors="replace").splitlines()
        sys.stdout.write("\n".join(text[-lines:] if lines > 0 else text) + ("\n" if text else ""))
        sys.stdout.flush()
        try:
            ended = over()
            while follow:
                chunk = fh.read()
                if chunk:
                    sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                    sys.stdout.flush()
                    continue
                if ended:  # the job is over and everything it wrote is printed
                    break
                time.sleep(0.5)
                ended = over()
        except KeyboardInterrupt:
            pass


def _log_over(run_dir: Path, name: str, every_s: float = 2.0) -> Callable[[], bool]:
    """Whether job ``name`` is over for ``oak logs -f``: done, failed or cancelled (the service's word, asked at
    most every ``every_s`` seconds), or, with no service running there, none of the rank processes its last
    committed state names alive (nothing will write its log until a service runs there again)."""
    from oak.runtime.procs import gone

    asked, ended = -math.inf, False

    def over() -> bool:
        nonlocal asked, ended
        if time.monotonic() - asked < every_s:
            return ended
        state, live = _status(run_dir)
        rows = [r for r in state["jobs"] if r["name"] == name]
        ended = not rows or rows[0]["state"] in ("done", "failed", "cancelled")
        if not ended and not live:
            ended = all(gone(int(pid)) for pid in rows[0].get("pids") or ())
        asked = time.monotonic()
        return ended

    return over


@app.command("explain")
def explain(
    run_dir: RunDir,
    name: Annotated[str, typer.Argument(help="The job.")],
    rounds: Annotated[int, typer.Option(help="How many of its last rounds to show.")] = 5,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rounds as JSON.")] = False,
) -> None:
    """Why a job waits or runs below its maximum: its last rounds — the reason, its best options and their
    values, and the jobs that hold the GPUs it would need (docs/jobs.md, "Why a job waits")."""
    import sqlite3

    from oak.runtime.store import RunStore, UnreadableRunState

    if rounds < 1:
        fail(f"--rounds {rounds}: expected a number of rounds >= 1")
    state, _ = _status(run_dir)
    row = _only(state, name)["jobs"][0]  # an unknown job is an input error naming the run's jobs
    db = run_dir / "state.sqlite"
    try:
        store = RunStore.for_reading(db)
        try:
            seen = store.explain(name, rounds)
        finally:
            store.close()
    except UnreadableRunState as exc:
        fail(str(exc))
    except (sqlite3.Error, ValueError, TypeError) as exc:  # a damaged or hand-edited row: JSONDecodeError, not a map
        fail(f"{db}: unreadable ({type(exc).__name__}: {exc})")
    if json_out:
        print(json.dumps({"job": name, "state": row["state"], "rounds": seen}, indent=1))
        return
    now = f"{name}: {row['state']}" + (f" — {row['why']}" if row.get("why") else "")
    console.print(escape(now))
    if row.get("reason"):  # failed for good: why, whatever the rounds said
        console.print(escape(f"failed for good: {row['reason']}"))
    if not seen:
        console.print("no round has decided it yet" if row["state"] == "queued" else "no round's reasons recorded")
        return
    for r in seen:
        # the heading on a line of its own: as a table's title it wrapped to the narrow table's width
        console.print(escape(f"round {r['k']} at t = {r['time_s']:,.0f} s · {r['code']}: {r['text']}"))
        t = Table()
        for col, just in (("option", "left"), ("devices", "right"), ("value", "right"), ("note", "left")):
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        best = (r.get("best") or {}).get("config")
        for o in r.get("options") or []:
            v = o.get("value")
            mark = "its best beyond what it got" if o["config"] == best else ""
            t.add_row(escape(o["config"]), str(o["gpus"]), "-" if v is None or v != v else f"{v:.4g}", mark)
        for job, v in r.get("rivals") or []:
            t.add_row(f"[dim]held by {escape(job)}[/]", "", f"{v:.4g}", "[dim]would have to make room[/]")
        console.print(t)
