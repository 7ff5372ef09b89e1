"""``denpex signatures``: list or show the signature catalog, or lint a pack (``--check``)."""

from __future__ import annotations

from denpex_tui.commands.common import EXIT_ERROR, EXIT_OK, error, json_out

__all__ = ["cmd_signatures"]


def cmd_signatures(args, cfg) -> int:
    from denpex_tui.core.catalog import load_catalog, load_pack

    if args.check:
        sigs, problems = load_pack(args.check)
        for s in sigs:
            if not any(e.match for e in s.examples) and not s.evidence_only:
                problems.append(_problem(s.path, "examples", "no matching example line: the pack cannot be tested"))
            for e in s.examples:
                from denpex_tui.core.lines.facts import parse_line

                got = s.matches(parse_line(e.line).text)
                if got != e.match:
                    problems.append(
                        _problem(s.path, "examples", f"line {'does not match' if e.match else 'matches'}: {e.line[:80]}")
                    )
        from denpex_tui.core.text import safe_str

        for p in problems:
            error(f"signatures: {p}")
        print(f"{len(sigs)} signature(s) valid, {len(problems)} problem(s) in {safe_str(args.check)}")
        return EXIT_ERROR if problems or not sigs else EXIT_OK
    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    cat = load_catalog(sig_dirs)
    for p in cat.problems:
        error(f"signatures: {p}")
    if args.id:
        sig = cat.get(args.id)
        if sig is None:
            error(f"no signature with id {args.id!r} (see 'denpex signatures')")
            return EXIT_ERROR
        if args.json:
            json_out(sig.to_json())
        else:
            from denpex_tui.render.explain_view import print_signature
            from denpex_tui.render.report import make_console

            print_signature(sig, make_console())
        return EXIT_OK
    sigs = sorted(cat, key=lambda s: s.id)
    if args.json:
        json_out({"schema": 1, "signatures": [s.to_json() for s in sigs]})
    else:
        from rich.text import Text

        from denpex_tui.render.report import make_console

        con = make_console()
        for s in sigs:
            t = Text(f"{s.id:<40} ")
            t.append(f"{s.role:<11}", style={"initiating": "red", "collateral": "yellow"}.get(s.role, "cyan"))
            t.append(f" {s.phase:<16} {s.title}")
            if not s.builtin:
                t.append(f"  [user pack: {s.pack}]", style="magenta")
            con.print(t)
        con.print(Text(f"{len(sigs)} signatures", style="dim"))
    return EXIT_OK


def _problem(path, field, message):
    from denpex_tui.core.catalog import CatalogProblem

    return CatalogProblem(path, field, message)
