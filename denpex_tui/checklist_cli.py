"""The checklist commands: ``checkpoints``, ``footprint``, ``verify``, ``evidence``.

Registered by ``cli.build_parser`` through :func:`add_parsers`; each command answers one item
of a signature's checklist (``[[checklist]] command = ...``). Exit codes as everywhere: 0 ok,
1 found something, 2 usage or input error (one line on stderr).
"""

from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class InputError(Exception):
    """Bad input: the CLI prints it as one line and exits 2."""


def _json_out(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


def _console():
    from denpex_tui.render.report import make_console

    return make_console()


def _warn(msg: str) -> None:
    from denpex_tui.core.text import safe_str

    print(f"denpex: warning: {safe_str(msg)}", file=sys.stderr)


# -- checkpoints --------------------------------------------------------------------------


def cmd_checkpoints(args, _cfg) -> int:
    from denpex_tui.core.checkpoints import CheckpointError, inspect_checkpoints

    try:
        rep = inspect_checkpoints(args.dir)
    except CheckpointError as exc:
        raise InputError(str(exc)) from None
    if not rep.tags:
        raise InputError(f"{args.dir}: no checkpoint tags found (global_stepN, checkpoint-N, iter_NNNNNNN, "
                         "a .metadata folder, *.ckpt)")
    if args.json:
        for w in rep.warnings:
            _warn(w)
        _json_out(rep.to_json())
    else:
        from denpex_tui.render.checklist_view import print_checkpoints

        print_checkpoints(rep, _console())
    return EXIT_OK if all(t.complete for t in rep.tags) and not rep.warnings else EXIT_FOUND


# -- footprint ----------------------------------------------------------------------------


def cmd_footprint(args, _cfg) -> int:
    from denpex_tui.core.footprint import FootprintError, compute, judge, load_config, parse_count

    try:
        fp = compute(load_config(args.config), parse_count(args.params), args.world_size, args.nodes,
                     optimizer=args.optimizer)
    except FootprintError as exc:
        raise InputError(str(exc)) from None
    if not args.no_measure:
        from denpex_tui.probes.sampler import read_path

        judge(fp, {e["path"]: read_path(e["path"]) for e in fp.nvme_paths})
    if args.json:
        _json_out(fp.to_json())
    else:
        from denpex_tui.render.checklist_view import print_footprint

        print_footprint(fp, _console())
    return EXIT_FOUND if any(e.get("fits") is False for e in fp.nvme_paths) else EXIT_OK


# -- registration -------------------------------------------------------------------------


def add_parsers(sub) -> None:
    c = sub.add_parser("checkpoints", help="which checkpoint tags are complete, and which to resume from")
    c.add_argument("dir", metavar="DIR", help="the checkpoint folder (DeepSpeed, HF Trainer, Megatron, DCP, Lightning)")
    c.add_argument("--json", action="store_true", help='one object: {"schema": 1, "checkpoints": [...], "resume_from"}')
    c.set_defaults(func=_guard(cmd_checkpoints))

    f = sub.add_parser("footprint", help="ZeRO-Infinity NVMe swap bytes per rank and node vs free space on nvme_path")
    f.add_argument("--config", required=True, metavar="ds_config.json", help="the DeepSpeed config")
    f.add_argument("--params", required=True, metavar="N", help="parameter count: 7e9, 7B, 125M")
    f.add_argument("--world-size", required=True, type=int, metavar="W", help="number of ranks")
    f.add_argument("--nodes", type=int, metavar="N", help="number of nodes (for the per-node figure)")
    f.add_argument("--optimizer", metavar="NAME", help="optimizer when the config has none (a client optimizer)")
    f.add_argument("--no-measure", action="store_true", help="do not measure nvme_path on this node")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_guard(cmd_footprint))


def _guard(fn):
    def run(args, cfg) -> int:
        try:
            return fn(args, cfg)
        except InputError as exc:
            from denpex_tui.core.text import safe_str

            print(f"denpex: {safe_str(str(exc))}", file=sys.stderr)
            return EXIT_ERROR

    return run
