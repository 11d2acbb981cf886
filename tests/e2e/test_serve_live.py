"""`censusdp serve` against a real Prefect server that the test starts: docs/commands.md's
commands — `prefect deployment run censusdp-release/scheduled -p rho=1.5` and `-p config_path=...` — publish,
and a run the ledger refuses fails in Prefect with the reason."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.config.ledger_location import default_ledger_location
from tests.helpers.decoy import decoy_project
from tests.helpers.tiny import TINY_TOML

DEPLOYMENT = "censusdp-release/scheduled"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(check, what: str, timeout: float = 180) -> None:  # noqa: ANN001 - a zero-argument predicate
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def healthy(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/health", timeout=2) as response:  # noqa: S310 - loopback only
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_serve_runs_the_readme_commands_against_a_live_server(tiny_release: Path, tmp_path: Path,
                                                               prefect_home: Path) -> None:
    tiny_release.write_text(TINY_TOML.format(rho="4").replace('cap_rho = "1000"', 'cap_rho = "5"'))
    other = tmp_path / "new-allocation.toml"
    other.write_text(TINY_TOML.format(rho="2").replace('cap_rho = "1000"', 'cap_rho = "5"'))
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    project = decoy_project(tmp_path / "project")  # served from a folder with its own flows/ and pipeline/
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "PYTHONPATH": str(project),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    env.pop("PREFECT_API_URL", None)

    def api_post(path: str, body: dict) -> list[dict]:
        with urllib.request.urlopen(urllib.request.Request(  # noqa: S310 - loopback only
                f"{api}/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                method="POST"), timeout=10) as response:
            return json.loads(response.read())

    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    serve = None
    try:
        wait_for(lambda: healthy(api), "the Prefect server")
        env["PREFECT_API_URL"] = api
        runs = tmp_path / "runs"
        serve = subprocess.Popen([sys.executable, "-m", "censusdp.pipeline.cli", "serve", str(tiny_release), "--cron",
                                  "0 2 * * *", "--out", str(runs)], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, cwd=project)

        def deployment_run(*params: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "prefect", "deployment", "run", DEPLOYMENT, "--watch",
                    "--watch-timeout", "240"]
            for param in params:
                argv += ["-p", param]
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)

        def deployed() -> bool:  # asked of the API: a `prefect deployment ls` process a poll costs seconds of CPU
            return any(d["name"] == "scheduled" for d in api_post("deployments/filter", {}))

        wait_for(deployed, "the served deployment")
        first = deployment_run("rho=1.5")  # a JSON number, as docs/commands.md writes it
        assert first.returncode == 0 and "Completed" in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
        second = deployment_run(f"config_path={other}")
        assert second.returncode == 0 and "Completed" in second.stdout, second.stdout[-2000:]
        refused = deployment_run("rho=3")  # 1.5 + 2 spent of 5: refused by the ledger
        assert "Failed" in refused.stdout + refused.stderr, refused.stdout[-2000:]
        published = sorted(json.loads((d / "manifest.json").read_text())["privacy"]["rho_exact"]
                           for d in runs.iterdir() if not d.name.startswith("."))
        assert published == ["2", "3/2"]
        ledger = PrivacyLedger(default_ledger_location())
        assert [c.rho for c in ledger.charges()] == [Fraction(3, 2), Fraction(2)]
        assert all(c.publishable for c in ledger.charges())  # served runs draw from the CSPRNG
        (failed,) = api_post("flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["FAILED"]}}}})
        assert failed["parameters"] == {"rho": 3} or failed["parameters"].get("rho") == 3
        assert "exceeds the remaining budget" in failed["state"]["message"]
    finally:
        for process in (serve, server):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
