"""The checklist commands: ``checkpoints``, ``footprint``, ``verify``, ``evidence``.

Registered by ``cli.build_parser`` through :func:`add_parsers`; each command answers one item
of a signature's checklist (``[[checklist]] command = ...``). Exit codes as everywhere: 0 ok,
1 found something, 2 usage or input error (one line on stderr).
"""

from __future__ import annotations

import sys

from denpex_tui.commands.common import EXIT_ERROR, EXIT_FOUND, EXIT_OK, InputError, console
from denpex_tui.commands.common import json_out as _json_out
from denpex_tui.commands.common import warn as _warn


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

        print_checkpoints(rep, console())
    return EXIT_OK if all(t.complete for t in rep.tags) and not rep.warnings else EXIT_FOUND


# -- footprint ----------------------------------------------------------------------------


def cmd_footprint(args, _cfg) -> int:
    from denpex_tui.core.footprint import FootprintError, compute, judge, load_config, parse_count

    params, world, cfg, notes = args.params, args.world_size, None, []
    try:
        if args.from_logs:
            from denpex_tui.core.footprint_logs import config_from_logs
            from denpex_tui.core.sources import discover

            files = [s.path for s in discover(list(args.from_logs)).sources if s.kind != "error-json"]
            if not files:
                raise InputError("no log files found in " + ", ".join(args.from_logs))
            try:
                cfg, lp, lw, notes = config_from_logs(files)
            except (ValueError, OSError) as exc:
                raise InputError(str(exc)) from None
            params = params if params is not None else lp
            world = world if world is not None else lw
        if args.config:
            cfg = load_config(args.config)
        if cfg is None:
            raise InputError("footprint needs --config ds_config.json or --from-logs PATH")
        if params is None:
            raise InputError("the parameter count is not in the logs: give --params N")
        if world is None:
            raise InputError("the world size is not in the logs: give --world-size W")
        fp = compute(cfg, parse_count(params), world, args.nodes, optimizer=args.optimizer)
        fp.notes[:0] = notes
    except FootprintError as exc:
        raise InputError(str(exc)) from None
    if not args.no_measure:
        from denpex_tui.probes.sampler import read_path

        judge(fp, {e["path"]: read_path(e["path"]) for e in fp.nvme_paths})
    if args.json:
        _json_out(fp.to_json())
    else:
        from denpex_tui.render.checklist_view import print_footprint

        print_footprint(fp, console())
    return EXIT_FOUND if any(e.get("fits") is False for e in fp.nvme_paths) else EXIT_OK


# -- verify -------------------------------------------------------------------------------


def scan_logs(paths, sig_dirs=None, confine=None, progress_steps_max=0):
    from denpex_tui.core.scan import scan_paths

    try:
        res = scan_paths(list(paths), signature_dirs=sig_dirs, confine=confine, progress_steps_max=progress_steps_max)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if res.readable_sources == 0:
        raise InputError(res.nothing_read(list(paths)))
    return res


def split_signatures(items, catalog) -> tuple[list[str], list[str]]:
    """Leading catalog ids are signatures, the rest paths; an id-looking word that is neither
    a known signature nor an existing path is bad input."""
    import os
    import re

    sigs, paths = [], []
    for it in items:
        if not paths and catalog.get(it) is not None:
            sigs.append(it)
        elif os.path.exists(it) or any(ch in it for ch in "*?["):
            paths.append(it)
        elif re.match(r"^[a-z0-9]+(?:\.[a-z0-9-]+)+$", it):
            raise InputError(f"{it}: not a known signature (see 'denpex signatures') and not a path")
        else:
            raise InputError(f"{it}: no such file or directory")
    return sigs, paths


def cmd_verify(args, cfg) -> int:
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.verify import Baseline, VerifyError, baseline_from_scan, verify

    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    sigs, paths = split_signatures(args.items, load_catalog(sig_dirs))
    if not paths:
        raise InputError("verify needs the rerun's logs: SIGNATURE... PATH...")
    try:
        if args.from_:
            from denpex_tui.core.bundle_read import is_bundle, read_bundle

            if is_bundle(args.from_, strict=True):
                b = read_bundle(args.from_)
                if b.get("verify_baseline") is None:  # the bundle of a hang or of a clean run
                    if not (sigs and args.step is not None):
                        raise InputError(f"{args.from_}: the bundle records no failure to verify against "
                                         "(a hang or a clean run): name the SIGNATURE and give --step N")
                    base = Baseline(sigs, args.step, source=args.from_)
                else:
                    base = Baseline.from_json(b["verify_baseline"], args.from_)
                if sigs:
                    base.signatures = sigs
            else:
                base = baseline_from_scan(scan_logs([args.from_], sig_dirs), sigs, args.from_)
            if args.step is not None:
                base.step = args.step
        elif args.step is not None:
            if not sigs:
                raise InputError("with --step, name the SIGNATURE(s) that must be gone")
            base = Baseline(sigs, args.step, source="--step")
        else:
            raise InputError("verify needs the failing run to compare with: --from BUNDLE (or the failing run's "
                             "logs) or --step N")
    except (VerifyError, ValueError) as exc:  # SchemaError, UntrustedError: a bad bundle is one line
        raise InputError(str(exc)) from None
    res = verify(scan_logs(paths, sig_dirs), base)
    if args.json:
        _json_out(res.to_json())
    else:
        from denpex_tui.render.checklist_view import print_verify

        print_verify(res, console())
    return EXIT_OK if res.ok else EXIT_FOUND


# -- evidence: denpex_tui/render/bundle.py ---------------------------------------------------


def scan_bundle(path: str, args) -> int:
    """``denpex scan BUNDLE``: the diagnosis stored in an evidence bundle, shown as scan shows it."""
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.bundle_read import bundle_scan

    from denpex_tui.core.schema import SchemaError

    try:
        result = bundle_scan(path, load_catalog(list(getattr(args, "signatures", None) or [])))
        from denpex_tui.probes.leak import name_leak_in_bundle

        name_leak_in_bundle(result, path)  # the bundle's own probe readings name the fd leak, or not
    except SchemaError as exc:
        from denpex_tui.core.text import safe_str

        print(f"denpex: {safe_str(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        _json_out(result.to_json())
    else:
        from denpex_tui.render.report import print_scan

        print_scan(result, console(), verbose=args.verbose, measure=False)
    return EXIT_FOUND if result.incidents else EXIT_OK


# -- scan --control / the failure's rhythm -------------------------------------------------


class ScanExtras:
    """What the checklist adds to a scan: the known-good control comparison (``--control``)
    and the failure's rhythm (checkpoint saves per rank, across ``--runs``)."""

    def __init__(self, control=None, rhythm=None):
        self.control, self.rhythm = control, rhythm

    @property
    def json(self) -> dict:
        out = {}
        if self.control is not None:
            out["control"] = self.control.to_json()
        if self.rhythm is not None:
            out["rhythm"] = self.rhythm.to_json()
        return out

    def print(self, con) -> None:
        from denpex_tui.render.checklist_view import print_control, print_rhythm

        if self.rhythm is not None:
            print_rhythm(self.rhythm, con)
        if self.control is not None:
            print_control(self.control, con)


# The rhythm counts each rank's saves in scan's pass: automatic for jobs up to this size, asked for above.
RHYTHM_AUTO_BYTES = 256 << 20


def rhythm_bytes(args) -> int:
    """The biggest job whose rhythm this scan may show: its pass counts each rank log's steps and
    saves up to that size (``scan_paths(progress_steps_max=...)``), so nothing is read twice."""
    return sys.maxsize if getattr(args, "rhythm", False) or getattr(args, "runs", None) else RHYTHM_AUTO_BYTES


def scan_extras(result, args) -> ScanExtras:
    from denpex_tui.core.rhythm import checkpoint_related, combine, rhythm_of

    control_paths = list(getattr(args, "control", None) or [])
    runs = list(getattr(args, "runs", None) or [])
    control = rhythm = None
    if control_paths:
        from denpex_tui.core.control import compare_with_control

        control = compare_with_control(result, scan_logs(control_paths), list(args.paths), control_paths)
    auto = result.bytes_read <= RHYTHM_AUTO_BYTES or getattr(args, "rhythm", False)
    if (checkpoint_related(result) and auto) or runs:
        parts = [rhythm_of(result, " ".join(args.paths))]
        for r in runs:
            parts.append(rhythm_of(scan_logs([r], progress_steps_max=sys.maxsize), r))
        rhythm = combine(parts)
        if not rhythm.runs:
            rhythm = None
    return ScanExtras(control, rhythm)


# -- registration -------------------------------------------------------------------------


def add_scan_options(s) -> None:
    """``scan --control`` and ``scan --runs`` (the scan parser is built in cli.py)."""
    s.add_argument("--control", nargs="+", metavar="PATH",
                   help="a healthy run of the same job: per rank, the first line with no counterpart there "
                        "(put it after the PATHs)")
    s.add_argument("--rhythm", action="store_true",
                   help="count every rank's checkpoint saves before the failure even on a big job (it adds to "
                        "the pass over each rank's log; automatic up to 256 MB of logs)")
    s.add_argument("--runs", action="append", metavar="PATH",
                   help="another failing run of the same job: is the number of checkpoint saves before the "
                        "failure the same? (repeatable)")


def add_parsers(sub) -> None:
    c = sub.add_parser("checkpoints", help="which checkpoint tags are complete, and which to resume from")
    c.add_argument("dir", metavar="DIR", help="the checkpoint folder (DeepSpeed, HF Trainer, Megatron, DCP, Lightning)")
    c.add_argument("--json", action="store_true", help='one object: {"schema": 1, "checkpoints": [...], "resume_from"}')
    c.set_defaults(func=_guard(cmd_checkpoints))

    f = sub.add_parser("footprint", help="ZeRO-Infinity NVMe swap bytes per rank and node vs free space on nvme_path")
    f.add_argument("--config", metavar="ds_config.json", help="the DeepSpeed config")
    f.add_argument("--from-logs", nargs="+", metavar="PATH",
                   help="read the config echo, parameter count and world size the logs print instead")
    f.add_argument("--params", metavar="N", help="parameter count: 7e9, 7B, 125M")
    f.add_argument("--world-size", type=int, metavar="W", help="number of ranks")
    f.add_argument("--nodes", type=int, metavar="N", help="number of nodes (for the per-node figure)")
    f.add_argument("--optimizer", metavar="NAME", help="optimizer when the config has none (a client optimizer)")
    f.add_argument("--no-measure", action="store_true", help="do not measure nvme_path on this node")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_guard(cmd_footprint))

    v = sub.add_parser("verify", help="after the fix: exit 0 only if the rerun got as far and the signature is gone")
    v.add_argument("items", nargs="+", metavar="SIGNATURE... PATH...",
                   help="signature ids that must be gone, then the rerun's logs (files, directories, globs)")
    v.add_argument("--from", dest="from_", metavar="BUNDLE|PATH",
                   help="the failing run: an evidence bundle, or its logs (signatures default to its diagnosis)")
    v.add_argument("--step", type=int, metavar="N", help="the step the failing run reached (instead of reading it)")
    v.add_argument("--signatures", action="append", metavar="DIR", help="extra signature pack")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_guard(cmd_verify))

    e = sub.add_parser("evidence", help="write an evidence bundle (excerpts, diagnosis, probe snapshot) before restarting")
    e.add_argument("paths", nargs="+", metavar="PATH", help="the job's logs (files, directories, globs)")
    e.add_argument("-o", "--output", required=True, metavar="OUT", help="a new folder, or OUT.tar.gz")
    e.add_argument("--with-env", action="store_true",
                   help="also run nvidia-smi and python -I -m torch.utils.collect_env (isolated), and keep the "
                        "allowed environment variables")
    e.add_argument("--python", metavar="PY", help="with --with-env: the training environment's interpreter "
                                                   "(default: the one running denpex)")
    e.add_argument("--signatures", action="append", metavar="DIR", help="extra signature pack")
    e.set_defaults(func=_guard(_evidence))


def _evidence(args, cfg) -> int:
    # imported when run: the bundle maker imports the whole scan (numpy, the catalog), 0.2 s
    # that every other command, --help and --version paid while the parser was built
    from denpex_tui.commands.evidence import cmd_evidence

    return cmd_evidence(args, cfg)


def _guard(fn):
    def run(args, cfg) -> int:
        try:
            return fn(args, cfg)
        except InputError as exc:
            from denpex_tui.core.text import safe_str

            print(f"denpex: {safe_str(str(exc))}", file=sys.stderr)
            return EXIT_ERROR

    return run
