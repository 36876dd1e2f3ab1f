"""``rapt-audit privatize``: run a defense on the user's own text, the way it runs on their device."""

from __future__ import annotations

import argparse
import sys
from collections import deque
from typing import Any, Iterator, TextIO

from rapt_audit.api.files import AtomicWrites, json_text, remove_stray_temps
from rapt_audit.api.outputs import STDIO, check_outputs, file_target
from rapt_audit.cli.options import defense_params
from rapt_audit.user_side.formats import FORMATS, Item, Layout, Writer, open_input, read_items, write_output
from rapt_audit.user_side.privatizer import Privatizer

EPILOG = """examples:
  rapt-audit privatize notes.txt --defense pct2t --set eta=75 --out notes.private.txt
  rapt-audit privatize notes.txt --defense t2t --set eta=100 --seed 7
  rapt-audit privatize reviews.jsonl --field body --defense rapt --set eta=100 --out private.jsonl
  rapt-audit privatize reviews.csv --field review --defense embedding --set eta=75 --out vectors.csv
Standard input works too (cat notes.txt | rapt-audit privatize --defense t2t), as does a pipe: <(cmd).
Each record is privatized on its own: text in, privatized text out (token vectors for the embedding
defenses, as JSON lists). With --out FILE a sidecar FILE.privatize.json records the mechanism, its
parameters, eta, seed, model fingerprint and the counts (units replaced, passed through in the clear,
by POS category). The audit tells you which eta to pick: rapt-audit run --defense pct2t --sweep eta=..."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``privatize`` sub-command."""
    p = sub.add_parser("privatize", help="privatize your own text with a defense (user side)", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="?", default="-", help="input file (default: standard input)")
    p.add_argument("--defense", default="pct2t", help="defense name (rapt-audit ls defenses; default pct2t)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="defense parameter: eta=75, replacement=0.5, categories=noun,verb ...")
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw, 0 to 2**32-1 (default 0)")
    p.add_argument("--out", default=None, help="output file (default: standard output)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="input layout (default: from the extension; .jsonl/.ndjson, .csv/.tsv, else text lines)")
    p.add_argument("--field", default=None, help="JSON field or CSV column holding the text (default 'text')")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict",
                   help="invalid UTF-8: stop and name the byte (strict, default) or substitute U+FFFD")
    p.add_argument("--sidecar", default=None, help="where to write the JSON record (default: OUT.privatize.json)")
    p.add_argument("--model", default="minilm", help="minilm (bundled), a Hugging Face id or a local directory")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"], help="torch device (default cpu)")
    p.add_argument("--data-dir", dest="data_dir", default=None,
                   help="data directory, for replacement= calibration on public text (default $RAPT_AUDIT_DATA)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary on standard error")


def _with_progress(items: Iterator[Item], handle: Any, size: int | None, quiet: bool) -> Iterator[Item]:
    """``items``, advancing a byte progress bar on standard error (files only, not with --quiet)."""
    if quiet or size is None or not sys.stderr.isatty():
        yield from items
        return
    from tqdm import tqdm  # lazy (tqdm)

    with tqdm(total=size, unit="B", unit_scale=True, desc="privatize", file=sys.stderr) as bar:
        for item in items:
            yield item
            bar.update(handle.tell() - bar.n)


def replacement_summary(units: dict[str, Any], clear: int) -> str:
    """``3 of 9 unit(s) replaced; 6 sent in the clear (unchanged: 2 not privatized, 4 privatized as themselves)``.

    Every unit released as it was counts as sent in the clear, whatever the reason: outside the selected
    categories (``passed``), or privatized but released as itself (the noise drew the same word; η = ∞).
    """
    total = units["perturbed"] + units["passed"] + units["dropped"]
    kept = units["perturbed"] - units["replaced"]
    reasons = [f"{n} {why}" for n, why in ((units["passed"], "not privatized"), (kept, "privatized as themselves"))
               if n]
    dropped = f", {units['dropped']} dropped" if units["dropped"] else ""
    text = (f"{units['replaced']} of {total} unit(s) replaced{dropped}; {clear} of {total} sent in the clear"
            + (f" (released unchanged: {', '.join(reasons)})" if reasons else ""))
    return text + ("; WARNING: the output is the input" if total and clear == total else "")


def _remove_killed_runs_temporaries(paths: list[str]) -> None:
    """Remove what a killed privatize left beside these outputs: privatized text must not outlive its command."""
    for path in paths:
        target = file_target(path, name="--out")[0]
        remove_stray_temps(target.parent, target.name)  # only our own, and none a live run is writing


def _privatize(args: argparse.Namespace, layout: Layout, privatizer: Privatizer,
               commit: AtomicWrites) -> dict[str, Any]:
    """Read the input once, privatize it batch by batch into ``commit`` (or standard output); the sidecar record."""
    with open_input(args.input) as (handle, name, size):
        items = _with_progress(read_items(handle, layout, name=name, errors=args.errors), handle, size, args.quiet)

        def produce(stream: TextIO) -> None:
            writer, pending = Writer(stream, layout), deque()

            def texts() -> Iterator[str]:
                for item in items:
                    pending.append(item)
                    yield item.text

            for value in privatizer.stream(texts()):
                writer.write(pending.popleft(), value)
                if not pending:  # a batch is out: let a reader of the pipe see it now
                    stream.flush()

        write_output(args.out, produce, commit)
    return privatizer.summary(input=name, output=args.out or "<stdout>", layout=layout.fmt,
                              field=None if layout.fmt == "text" else layout.field)


def cmd_privatize(args: argparse.Namespace) -> int:
    """Privatize the input record by record; write the output and the sidecar record."""
    layout = Layout.for_path(args.input, args.format, args.field)
    # The default sidecar sits beside a file; a stream (-, a FIFO, /dev/null) has none unless --sidecar names it.
    streamed = args.out in (None, STDIO) or file_target(args.out, name="--out")[1]
    sidecar = args.sidecar or (None if streamed else f"{args.out}.privatize.json")
    # The output rule, before the model loads: never the input, never each other, never a device.
    check_outputs([("--out", 1 if args.out in (None, STDIO) else args.out), ("--sidecar", sidecar)],
                  [("input", 0 if args.input in (None, STDIO) else args.input)])
    files = [path for path in (None if streamed else args.out, sidecar) if path]
    _remove_killed_runs_temporaries(files)
    privatizer = Privatizer(args.defense, defense_params(args.sets), seed=args.seed, model=args.model,
                            device=args.device, data_dir=args.data_dir)
    with AtomicWrites(files) as commit:  # the output and its sidecar replace the old pair together, or neither does
        record = _privatize(args, layout, privatizer, commit)
        if sidecar:
            commit.write(sidecar, lambda handle: handle.write((json_text(record) + "\n").encode("utf-8")))
    if not args.quiet:
        units, where = record["units"], (f"; record in {sidecar}" if sidecar else "")
        setting = ", ".join(f"{key} {record[key]}" for key in ("eta", "epsilon") if record[key] is not None)
        head = f"privatized {record['records']} record(s) with {args.defense} ({setting or 'no noise'}, seed {args.seed})"
        if record["release_kind"] == "texts":
            detail = replacement_summary(units, record["sent_in_the_clear"])
        else:
            detail = f"{units['perturbed']} noisy {record['release_kind'].replace('_', ' ')} released as vectors"
        print(f"{head}: {detail}{where}", file=sys.stderr)
    return 0

