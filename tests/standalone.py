"""A real Spark standalone cluster for the tests: a master and workers started from the installed
pyspark (`spark-class`), on 127.0.0.1, each worker launching its own executor JVMs and Python
workers. Stopped, with every process it started, when the `with` block ends - failing or not."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:port
    env: dict[str, str]  # SPARK_HOME and the rest, for spark-submit
    spark_home: Path
    work: Path  # the workers' work dir: app-*/<executor>/stdout|stderr

    def executor_dirs(self) -> list[Path]:
        return sorted(self.work.glob("app-*/*/stderr"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextlib.contextmanager
def standalone_cluster(
    work: Path, workers: int = 2, cores: int = 1, memory: str = "1g", python: str | None = None
) -> Iterator[Cluster]:
    """A master and `workers` workers (`cores` cores and `memory` each); each process runs in a
    process group of its own, which is killed at the end (the executors and their Python workers
    with it). `python`: the Python of spark-submit's applications (`PYSPARK_PYTHON` in `env`);
    a session's own executors run the one its driver names."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work / "logs"),
        "PYSPARK_PYTHON": python or os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    port, master_ui = free_port(), free_port()
    spark_class = str(spark_home / "bin" / "spark-class")
    processes: list[subprocess.Popen] = []

    def start(name: str, args: list[str]) -> None:
        processes.append(
            subprocess.Popen(
                [spark_class, *args],
                env=env,
                stdout=open(work / f"{name}.log", "wb"),  # noqa: SIM115 - closed with the process
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        start("master", [*master, "--webui-port", str(master_ui)])
        url = f"spark://127.0.0.1:{port}"
        wait_for(
            lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, 120, "master"
        )
        for i in range(workers):
            start(
                f"worker{i}",
                ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
                + ["--cores", str(cores), "--memory", memory, "--webui-port", str(free_port())]
                + ["--work-dir", str(work)],
            )

        def registered() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as response:
                return json.load(response).get("aliveworkers", 0) >= workers

        wait_for(registered, 120, f"{workers} worker(s) to register")
        yield Cluster(url, env, spark_home, work)
    finally:
        for proc in reversed(processes):
            _stop(proc)
