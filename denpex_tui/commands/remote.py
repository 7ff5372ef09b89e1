"""``denpex probe --hosts a,b,c | --slurm-job J | --pods p,q [--probe-cmd T] [--json]``.

Starts the remote probes through the chosen transport, waits until every node has answered or
failed (at most ``--wait`` seconds), prints one merged snapshot (every process and path entry
tagged with its ``node``, every node with its status) and stops the transports. A node that
does not answer is reported, not fatal: the exit code is 0 whenever the command line was good.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from denpex_tui.probes.transports import (TransportError, kubectl_channels, parse_hosts, slurm_channels,
                         ssh_channels, template_channels)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("other nodes (through ssh, srun or kubectl; Denpex opens no socket)")
    g.add_argument("--hosts", metavar="A,B,C", help="probe these hosts (ssh, or --probe-cmd)")
    g.add_argument("--slurm-job", metavar="J", help="probe every node of this Slurm job (srun --overlap)")
    g.add_argument("--pods", metavar="P,Q", help="probe these Kubernetes pods (kubectl exec)")
    g.add_argument("--probe-cmd", metavar="TEMPLATE",
                   help="the command that runs 'denpex probe --stream --json' on {host} "
                        "(substituted and shell-quoted); overrides the transport's own")
    g.add_argument("--wait", default="20", metavar="S",
                   help="seconds to wait for every node's first snapshot (default 20)")


def wanted(args) -> bool:
    return any(getattr(args, k, None) for k in ("hosts", "slurm_job", "pods"))


def channel_specs(args) -> list:
    """The transports for the command line; raises TransportError (exit 2) on bad input."""
    given = [k for k in ("hosts", "slurm_job", "pods") if getattr(args, k, None)]
    if len(given) > 1:
        raise TransportError("give one of --hosts, --slurm-job, --pods")
    tpl = getattr(args, "probe_cmd", None)
    if not given:
        raise TransportError("--probe-cmd needs --hosts, --slurm-job or --pods (the nodes for {host})")
    if tpl is not None and not tpl.strip():
        raise TransportError("--probe-cmd is empty")
    if getattr(args, "hosts", None):
        hosts = parse_hosts(args.hosts)
        return template_channels(hosts, tpl, "cmd") if tpl else ssh_channels(hosts)
    if getattr(args, "pods", None):
        pods = parse_hosts(args.pods)
        return kubectl_channels(pods, tpl)
    return slurm_channels(args.slurm_job, tpl)


def collect(specs, *, wait: float, interval: float = 2.0, settle: float = 0.0):
    """Run the fleet until every node answered or failed, or ``wait`` passed; returns it stopped."""
    from denpex_tui.probes.fleet import Fleet

    fleet = Fleet(specs, interval=interval, answer_timeout=wait)
    fleet.start()
    t_end = time.monotonic() + wait
    try:
        while time.monotonic() < t_end:
            fleet.step(0.1)
            if fleet.settled() and all(st.source.snapshots or st.channel is None
                                       for st in fleet.nodes.values()):
                break
    finally:
        fleet.stop()
    return fleet


def run(args, err) -> int:
    try:
        specs = channel_specs(args)
        wait = float(getattr(args, "wait", "20"))
        if not 0.5 <= wait <= 3600:
            raise ValueError
    except TransportError as e:
        return err(str(e))
    except (TypeError, ValueError):
        return err(f"--wait: expected seconds between 0.5 and 3600, got {args.wait!r}")
    fleet = collect(specs, wait=wait)
    if getattr(args, "json", False):
        from denpex_tui.core.text import safe_json

        sys.stdout.write(json.dumps(safe_json(fleet.merged_json()), ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        from denpex_tui.render.fleet_view import render

        render(fleet)
    return 0


__all__ = ["add_arguments", "wanted", "channel_specs", "collect", "run"]
