"""The executor seam: results once per task whatever the path, a dead worker's task rerun, and
the default path free of Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.driving.executor import ExecutorConfig, InlineExecutor, ProcessExecutor, WorkItem, make_executor
from agents.driving.rollout import parallel_map
from nac.config import ConfigError
from tests.limits import seconds


def square(x: int) -> int:
    return x * x


def die_once(arg: tuple[str, int]) -> int:
    """Kills its worker process the first time it runs for a given marker, then answers."""
    marker, x = arg
    if not os.path.exists(marker):
        Path(marker).write_text("died")
        os._exit(1)
    return x + 100


def test_inline_and_process_paths_give_each_result_once():
    for cfg in (ExecutorConfig(workers=1), ExecutorConfig(workers=2)):
        with make_executor(cfg) as ex:
            for i in range(7):
                ex.submit(WorkItem(("k", i), square, i))
            got = dict(ex.results())
        assert got == {("k", i): i * i for i in range(7)}
    assert isinstance(make_executor(ExecutorConfig(workers=1)), InlineExecutor)
    assert isinstance(make_executor(ExecutorConfig(workers=2), tasks=1), InlineExecutor)  # never more workers than tasks


def test_a_dead_worker_is_replaced_and_its_task_rerun(tmp_path):
    ex = ProcessExecutor(workers=2, retries=2)
    try:
        ex.submit(WorkItem("dies", die_once, (str(tmp_path / "m"), 1)))
        for i in range(4):
            ex.submit(WorkItem(i, square, i))
        got = dict(ex.results())
    finally:
        ex.close()
    assert got == {"dies": 101, 0: 0, 1: 1, 2: 4, 3: 9}


def test_a_task_that_always_kills_its_worker_gives_up(tmp_path):
    from concurrent.futures.process import BrokenProcessPool

    ex = ProcessExecutor(workers=2, retries=1)
    try:
        ex.submit(WorkItem("dies", os._exit, 3))
        with pytest.raises(BrokenProcessPool, match="died 2 times"):
            dict(ex.results())
    finally:
        ex.close()


FORK_AFTER_TORCH = """
import torch
from agents.driving.executor import ProcessExecutor, WorkItem

def conv(_):
    return torch.get_num_threads(), float(torch.nn.Conv2d(3, 8, 8, 4)(torch.zeros(1, 3, 96, 96)).sum())

if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.nn.Conv2d(3, 8, 8, 4)(torch.zeros(8, 3, 96, 96))  # the parent's OpenMP pool exists before the fork
    ex = ProcessExecutor(workers=2, retries=0)
    for i in range(2):
        ex.submit(WorkItem(i, conv, i))
    print(sorted(r[0] for _, r in ex.results()))
    ex.close()
"""


def test_workers_forked_after_a_torch_op_run_torch_on_one_thread(tmp_path):
    # without the workers' one-thread initializer the children's first convolution waits forever (the inherited OpenMP pool)
    script = tmp_path / "fork_after_torch.py"
    script.write_text(FORK_AFTER_TORCH)
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=seconds(120), cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1, 1]"


def test_parallel_map_keeps_partial_results_on_failure():
    def boom(x: int) -> int:
        if x == 3:
            raise RuntimeError("bad item")
        return x

    with pytest.raises(RuntimeError) as exc:
        parallel_map(boom, [0, 1, 2, 3, 4], 1, desc="t")
    assert exc.value.partial == [0, 1, 2]


def test_the_default_path_does_not_import_ray():
    code = (
        "import sys; from agents.driving.rollout import parallel_map; from agents.driving.executor import ExecutorConfig; "
        "from tests.agents.driving.test_executor import square; "
        "assert parallel_map(square, [1, 2, 3], ExecutorConfig(workers=2), desc='t') is not None; "
        "import agents.studies.study, scripts.cli; scripts.cli.build_parser(); "
        "assert 'ray' not in sys.modules, 'ray was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])


def test_config_refuses():
    with pytest.raises(ConfigError, match="workers"):
        ExecutorConfig(workers=-1)
