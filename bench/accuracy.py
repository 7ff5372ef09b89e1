"""Accuracy of `denpex scan` on logs it was not built with: the wild corpus (real logs users
pasted into public issue threads, tests/fixtures/wild/) and our own fault-injected runs
(tests/fixtures/runs/), each scored against its truth.json.

    python bench/accuracy.py [wild|runs|logdirs|all] [-v]

``logdirs`` scores our runs again on their ``logs/`` tree alone (torchrun's ``--log-dir``: no
console, no launcher record, no Flight Recorder dumps), as a user who kept only that would see it.

Prints the score by collection batch (a case's truth.json ``batch``: the README's table keeps each
batch's first score, taken before anything was changed for it), by family and by prefix format,
then every case that is wrong.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from scoring import cases, logdir_cases, score_case, table  # noqa: E402


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else "-"


def main(argv: list[str]) -> int:
    which = argv[0] if argv and not argv[0].startswith("-") else "all"
    verbose = "-v" in argv
    sets = ["wild", "runs", "logdirs"] if which == "all" else [which]
    for name in sets:
        if name == "logdirs":
            scores = [score_case(c, only="logs") for c in logdir_cases()]
        else:
            scores = [score_case(c) for c in cases(name)]
        if not scores:
            print(f"{name}: no cases")
            continue
        sig = sum(s.sig_ok for s in scores)
        ranked = [s for s in scores if s.rank_ok is not None]
        print(f"== {name}: {len(scores)} cases; signature {pct(sig, len(scores))}; "
              f"rank {pct(sum(bool(s.rank_ok) for s in ranked), len(ranked))}; "
              f"line {pct(sum(bool(s.line_ok) for s in scores), sum(s.line_ok is not None for s in scores))}")
        for title, key in (("batch", lambda s: [s.batch]), ("family", lambda s: [s.family]),
                           ("format", lambda s: s.formats or ["?"])):
            print(f"  by {title}:")
            for k, (a, b, c, d) in table(scores, key).items():
                print(f"    {k:24} signature {pct(a, b):14} rank {pct(c, d)}")
        coll = [s for s in scores if s.collateral_ok is not None]
        if coll:
            print(f"  collateral set {pct(sum(s.collateral_ok for s in coll), len(coll))}")
        wrong = [s for s in scores if not s.sig_ok or s.rank_ok is False or s.collateral_ok is False]
        print(f"  wrong ({len(wrong)}):")
        for s in wrong:
            coll = "" if s.collateral_ok is not False else " (collateral set wrong)"
            print(f"    [{s.batch}] {s.name}: got {s.got_sig} rank {s.got_rank}; truth {s.accept[:3]} rank {s.truth_rank}{coll}")
        if verbose:
            for s in scores:
                print(f"    {'ok ' if s.sig_ok else 'BAD'} {s.name}: {s.got_sig} @ {s.got_line} (truth {s.truth_line})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
