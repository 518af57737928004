"""Developer entry point: `test` runs the suite, `run` runs the system, both with services.

Without DATABASE_URL and REDIS_URL, embedded PostgreSQL and Redis are started under
``.local/`` (git-ignored, Unix sockets only) and stopped again on exit or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beat_engine.clock import SystemClock  # noqa: E402
from beat_engine.log_format import label_line  # noqa: E402
from scheduler_project.embedded import EmbeddedServices  # noqa: E402

PYTHON = sys.executable
BIN = Path(PYTHON).parent


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


@contextmanager
def services(name: str) -> Iterator[dict[str, str]]:
    """Yield an environment pointing at PostgreSQL and Redis, starting embedded ones if needed."""
    env = dict(os.environ)
    given = {key: env[key] for key in ("DATABASE_URL", "REDIS_URL") if env.get(key)}
    if len(given) == 2:
        print("==> using DATABASE_URL and REDIS_URL from the environment", flush=True)
        yield env
        return
    embedded = EmbeddedServices(ROOT / ".local" / name)
    print(f"==> starting embedded PostgreSQL and Redis in .local/{name}", flush=True)
    started = embedded.start()
    # A URL given for one service is honoured; the embedded one fills the gap.
    env.update({key: value for key, value in started.items() if key not in given})
    env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]
    try:
        yield env
    finally:
        print("==> stopping embedded PostgreSQL and Redis", flush=True)
        embedded.stop()


def run_tests(pytest_args: list[str]) -> int:
    signal.signal(signal.SIGTERM, _raise_stop)
    # SCHEDULER_SERVICES_DIR lets several suites run side by side, each with its own servers.
    with services(os.environ.get("SCHEDULER_SERVICES_DIR", "test")) as env:
        env["SCHEDULER_EMBEDDED"] = "1" if "DATABASE_URL" not in os.environ else "0"
        # The test database (and every beat node a test starts) keeps day partitions of the run
        # history for today and one day ahead instead of seven: fewer tables to create, plan
        # over and empty. The partition tests name their own number of days.
        env.setdefault("SCHEDULER_PARTITIONS_AHEAD_DAYS", "1")
        proc = subprocess.Popen([PYTHON, "-m", "pytest", *pytest_args], cwd=ROOT, env=env)
        try:
            return proc.wait()
        except (KeyboardInterrupt, _Stop):
            proc.send_signal(signal.SIGINT)
            return proc.wait()


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=env, check=True)


def _relay(proc: subprocess.Popen[bytes], label: str) -> None:
    """Print a child's output, every line in the text log shape with the child's label."""
    assert proc.stdout is not None
    clock = SystemClock()
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        if line.strip():
            print(label_line(line, label, at=clock.now()), flush=True)


# Prometheus metrics of the beat node and the worker host (docs/operations.md, "Scraping").
BEAT_METRICS_PORT = 9101
WORKER_METRICS_PORT = 9102


def _metrics_env(name: str) -> dict[str, str]:
    """Processes that fork keep their metrics in a directory of their own (multiprocess mode)."""
    if name == "web" or name.startswith("worker"):
        return {"PROMETHEUS_MULTIPROC_DIR": str(ROOT / ".local" / "run-metrics" / name)}
    return {}


def run_system(port: int, concurrency: int) -> int:
    signal.signal(signal.SIGTERM, _raise_stop)
    with services("run") as env:
        env.setdefault("DJANGO_DEBUG", "false")
        # Readable lines for people; production keeps the JSON default.
        env.setdefault("SCHEDULER_LOG_FORMAT", "text")
        _manage(env, "migrate", "--noinput", "-v", "0")
        _manage(env, "collectstatic", "--noinput", "-v", "0")
        _manage(env, "seed_demo", "--port", str(port))
        commands = {
            "web": [
                str(BIN / "gunicorn"),
                "-c",
                "python:scheduler_project.gunicorn_conf",
                "scheduler_project.wsgi",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "2",
                "--access-logfile",
                "-",
            ],
            "beat-1": [
                PYTHON,
                "manage.py",
                "beat_engine",
                "--node-id",
                "beat-1",
                "--metrics-port",
                str(BEAT_METRICS_PORT),
            ],
            "worker-1": [
                str(BIN / "celery"),
                "-A",
                "scheduler_project",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(concurrency),
                "--metrics-port",
                str(WORKER_METRICS_PORT),
            ],
        }
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name, cmd in commands.items():
                procs[name] = subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env={**env, "SCHEDULER_PROCESS_NAME": name, **_metrics_env(name)},
                    start_new_session=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
                threading.Thread(target=_relay, args=(procs[name], name), daemon=True).start()
                print(f"==> started {name} (pid {procs[name].pid})", flush=True)
            print(
                f"==> web on http://127.0.0.1:{port}/admin/  (Ctrl-C stops everything)", flush=True
            )
            print(
                f"==> metrics: http://127.0.0.1:{port}/metrics, "
                f"http://127.0.0.1:{BEAT_METRICS_PORT}/metrics (beat-1), "
                f"http://127.0.0.1:{WORKER_METRICS_PORT}/metrics (worker-1)",
                flush=True,
            )
            while all(p.poll() is None for p in procs.values()):
                time.sleep(0.5)
            dead = [n for n, p in procs.items() if p.poll() is not None]
            print(f"==> {', '.join(dead)} exited; stopping the rest", flush=True)
            return 1
        except (KeyboardInterrupt, _Stop):
            print("\n==> stopping web, beat and worker", flush=True)
            return 0
        finally:
            _terminate(procs)


def _terminate(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    test = sub.add_parser("test", help="run the test suite (extra arguments go to pytest)")
    test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    run = sub.add_parser("run", help="run web, beat engine and worker")
    run.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    run.add_argument("--concurrency", type=int, default=2)
    # Everything after `test` belongs to pytest, options included (`test -q -x`), which
    # argparse's REMAINDER does not pass through when the first of them is an option.
    if sys.argv[1:2] == ["test"]:
        return run_tests(sys.argv[2:])
    args = parser.parse_args()
    return run_system(args.port, args.concurrency)


if __name__ == "__main__":
    sys.exit(main())
