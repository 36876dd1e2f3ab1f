"""Peak memory of `rapt-audit privatize` by record count, defense and input layout (reports/benchmarks.md).

Builds the inputs the table in ``reports/benchmarks.md`` ("`privatize` in constant memory") describes —
SST-2's training sentences in file order, cycled, each sentence's words shuffled (``random.Random(0)``)
from the 67,350th record on so that the texts keep varying — as text lines, JSON Lines and CSV, then
runs each command alone under ``/usr/bin/time`` and prints a Markdown table of peak RSS, wall and CPU
seconds. Run it alone on the machine (other jobs change the times, not the memory):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/privatize_memory.py --data /work/shared/data \
        --defenses t2t,pct2t,rapt --layouts jsonl --sizes 6000,120000
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import subprocess
import sys
from pathlib import Path


def sentences(data: Path) -> list[str]:
    """SST-2's training sentences in file order (header skipped, trailing space removed)."""
    lines = (data / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0].rstrip() for line in lines if line.strip()]


def write_inputs(texts: list[str], n: int, folder: Path) -> dict[str, Path]:
    """``n`` records in the three layouts (cycled; words shuffled after the first pass)."""
    shuffle = random.Random(0)
    records = []
    for i in range(n):
        text = texts[i % len(texts)]
        if i >= len(texts):
            words = text.split()
            shuffle.shuffle(words)
            text = " ".join(words)
        records.append(text)
    paths = {layout: folder / f"sst_{n}.{ext}" for layout, ext in (("text", "txt"), ("jsonl", "jsonl"), ("csv", "csv"))}
    paths["text"].write_text("".join(t + "\n" for t in records), encoding="utf-8")
    with paths["jsonl"].open("w", encoding="utf-8") as out:
        for i, t in enumerate(records):
            out.write(json.dumps({"id": i, "body": t, "label": i % 2}) + "\n")
    with paths["csv"].open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "body", "label"])
        writer.writerows([i, t, i % 2] for i, t in enumerate(records))
    return paths


def measure(defense: str, layout: str, source: Path, out: Path) -> tuple[int, float, float]:
    """Peak RSS (KiB), wall and CPU seconds of one ``privatize`` command."""
    command = ["/usr/bin/time", "-f", "%M %e %U %S", sys.executable, "-m", "rapt_audit.cli.main", "privatize",
               str(source), "--defense", defense, "--format", layout, "--out", str(out), "--quiet"]
    if defense != "identity":
        command += ["--set", "eta=100"]
    if layout != "text":
        command += ["--field", "body"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if done.returncode != 0 or not re.fullmatch(r"[\d.]+ [\d.]+ [\d.]+ [\d.]+", last):
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    rss, wall, user, system = last.split()
    return int(rss), float(wall), float(user) + float(system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the data directory holding sst2/")
    parser.add_argument("--work", type=Path, default=Path("/tmp/privatize-memory"))
    parser.add_argument("--defenses", default="identity,t2t,pct2t,rapt")
    parser.add_argument("--layouts", default="text,jsonl,csv")
    parser.add_argument("--sizes", default="6000,60000,120000")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    texts, sizes = sentences(args.data), [int(s) for s in args.sizes.split(",")]
    inputs = {n: write_inputs(texts, n, args.work) for n in sizes}
    print("| defense | input | " + " | ".join(f"{n:,} records" for n in sizes) + f" | {sizes[-1] // 1000}k / {sizes[0] // 1000}k |")
    print("|---|---|" + "---|" * (len(sizes) + 1))
    for defense in args.defenses.split(","):
        for layout in args.layouts.split(","):
            cells, peaks = [], []
            for n in sizes:
                rss, wall, cpu = measure(defense, layout, inputs[n][layout], args.work / f"out.{defense}.{n}.{layout}")
                peaks.append(rss)
                cells.append(f"{rss / 1024:,.0f} MiB, {wall:.0f} s ({cpu:.0f} s)")
            print(f"| {defense} | {layout} | " + " | ".join(cells) + f" | {peaks[-1] / peaks[0] - 1:+.0%} |", flush=True)


if __name__ == "__main__":
    main()
