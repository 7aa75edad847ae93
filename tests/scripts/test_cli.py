"""The `nacdrive` command: help, one-line errors, and the benchmark end to end."""

import json
import subprocess
import sys

import pytest

from scripts.cli import COMMANDS, main


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: nacdrive " + command in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["nope"], "invalid choice: 'nope'"),
        (["bench", "nac", "--bogus"], "nacdrive bench: unrecognized arguments: --bogus"),
        (["bench", "nac", "--passes", "zero"], "expected a whole number >= 1, got 'zero'"),
        (["bench", "lstm"], "invalid choice: 'lstm' (choose from 'nac')"),
    ],
)
def test_bad_command_lines_end_with_one_line_saying_what_is_allowed(argv, expected):
    result = _run(*argv)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
    assert "Traceback" not in result.stderr


def test_bench_writes_a_table_and_json(tmp_path):
    out = tmp_path / "bench.json"
    result = _run("bench", "nac", "--seq-len", "64", "--passes", "1", "--max-len", "256", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "| NAC-Exact/8k |" in result.stdout and "| LSTM |" in result.stdout
    data = json.loads(out.read_text())
    models = {row["model"] for row in data["table"]}
    assert {"NAC-Exact/2k", "NAC-Exact/8k", "NAC-Exact/32k", "NAC-sqrt/8k", "NAC-PW", "MHA (torch)", "CfC", "LTC"} <= models
    assert all(row["mean_s"] > 0 and row["peak_mb"] > 0 for row in data["table"])
    assert [r["seq_len"] for r in data["scaling"] if r["model"] == "NAC-sqrt/8k"] == [256]
    assert 0 <= data["sqrt_recall"][0]["random"] <= 1
