"""W1 and W2 of two (or more) source trees side by side in one sitting: the same harness
(`w1_w2.py`) run against each tree's code, alternating trees, one run per invocation.

    git worktree add /tmp/cairn-base 79bab78
    python3 -m venv /tmp/cairn-base/.venv
    /tmp/cairn-base/.venv/bin/pip install -q -e '/tmp/cairn-base[test]'
    cp benchmarks/w1_w2.py /tmp/cairn-base/benchmarks/      # the same harness in every tree
    .venv/bin/python -m benchmarks.base_vs_head --mode embedded --rounds 3 \\
        --variant base=/tmp/cairn-base --variant head=. [--variant head-c1=.:CAIRN_DECIDER_CONSUMERS=1]

Each variant is NAME=TREE[:VAR=VALUE,...]: the tree's own venv (`TREE/.venv/bin/python`) runs
`python -m benchmarks.w1_w2 --runs 1` from the tree, with the variables added to its environment
(they reach every process it starts). Round r runs every variant once, in the order given, so
drift in the machine's load hits all of them alike. The load average is recorded before each
invocation. Ratios are the median of a variant over the median of the first one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cli import write_results
from benchmarks.w1_w2 import _spread

HARNESS = Path(__file__).resolve().parent / "w1_w2.py"
WORKLOADS = ("W1 K=10", "W1 K=1", "W2 K=1", "W2 K=3", "W2 K=10")
ENGINE = {  # the processes of the engine (and its servers): load generators excluded
    "embedded": ("dev", "worker"),
    "kafka": ("decider", "scheduler", "timer", "sweeper", "worker", "kafka", "ferretdb"),
}


def parse_variant(text: str) -> tuple[str, Path, dict[str, str]]:
    name, _, rest = text.partition("=")
    tree, _, variables = rest.partition(":")
    env = dict(item.split("=", 1) for item in variables.split(",") if item)
    return name, Path(tree).resolve(), env


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_once(tree: Path, env: dict[str, str], mode: str, quick: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = Path(out.name)
    argv = [str(tree / ".venv/bin/python"), "-m", "benchmarks.w1_w2", "--mode", mode, "--runs", "1"]
    argv += ["--json", str(path), *(["--quick"] if quick else [])]
    subprocess.run(argv, cwd=tree, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
    try:
        return json.loads(path.read_text())
    finally:
        path.unlink()


def engine_cpu(measured: dict[str, Any], mode: str) -> float:
    cpu = measured["cpu_s_per_1k_steps"]
    return sum(cpu.get(name, 0.0) for name in ENGINE[mode])


def summarise(results: dict[str, Any]) -> str:
    mode = results["mode"]
    variants = results["variants"]
    first = next(iter(variants))
    lines = [
        f"== {mode}{' (quick)' if results['quick'] else ''}: medians of {results['rounds']} runs [min-max]"
    ]
    for name, v in variants.items():
        lines.append(f"  {name}: {v['tree']} {v['commit']} env {v['env']}; load avg before runs: {v['load']}")
    lines.append(f"{'workload':9} {'variant':10} {'steps/s':>22} {'p50 ms':>24} {'p99 ms':>24}"
                 f" {'engine CPU-s/1k':>16} {'ratio steps/s':>13} {'ratio p50':>9}")  # fmt: skip

    def med(name: str, key: str, metric: str) -> float:
        return statistics.median(r[key][metric] for r in variants[name]["runs"])

    for key in WORKLOADS:
        for name, v in variants.items():
            runs = v["runs"]
            cells = [_spread([r[key][m] for r in runs]) for m in ("steps_per_s", "p50_ms", "p99_ms")]
            cpu = statistics.median(engine_cpu(r[key], mode) for r in runs)
            throughput = med(name, key, "steps_per_s") / med(first, key, "steps_per_s")
            latency = med(name, key, "p50_ms") / med(first, key, "p50_ms")
            lines.append(
                f"{key:9} {name:10} {cells[0]:>22} {cells[1]:>24} {cells[2]:>24} {cpu:16.1f}"
                f" {throughput:13.2f} {latency:9.2f}"
            )
    for name, v in variants.items():
        overhead = [r["per_step_overhead_ms"] for r in v["runs"]]
        lines.append(f"per-step overhead {name}: {_spread(overhead)} ms")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> dict[str, Any]:
    variants: dict[str, Any] = {}
    for text in args.variant:
        name, tree, env = parse_variant(text)
        harness = tree / "benchmarks/w1_w2.py"
        if harness.read_bytes() != HARNESS.read_bytes():
            sys.exit(f"{harness} is not this harness: copy {HARNESS} there first")
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True
        )
        variants[name] = {
            "tree": str(tree),
            "commit": commit.stdout.strip(),
            "env": env,
            "runs": [],
            "load": [],
        }
    results = {"mode": args.mode, "quick": args.quick, "rounds": args.rounds, "started": time.strftime("%c")}
    for round_ in range(args.rounds):
        for name, v in variants.items():
            v["load"].append(load_average())
            print(f"round {round_ + 1}/{args.rounds}: {name} (load {v['load'][-1]})", flush=True)
            outcome = run_once(Path(v["tree"]), v["env"], args.mode, args.quick)
            v["runs"].append(outcome["modes"][args.mode]["runs"][0])
            v["durability"] = outcome["modes"][args.mode]["durability"]
    results["finished"] = time.strftime("%c")
    results["variants"] = variants
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("embedded", "kafka"), required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variant", action="append", required=True, help="NAME=TREE[:VAR=VALUE,...]")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    outcome = main(args)
    if args.json:
        write_results(args.json, outcome)
    print(summarise(outcome))
