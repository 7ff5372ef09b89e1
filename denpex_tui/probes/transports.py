"""Transports: how ``denpex probe --stream --json`` is started on the job's nodes.

Denpex grows no agent network and opens no socket: a transport is a command line of a tool the
cluster already has (``ssh``, ``srun``, ``kubectl``), run as the user, whose stdout carries the
remote probe's JSON Lines. Each is a :class:`ChannelSpec`: the argv to start, the nodes it
speaks for, and how to tell their lines apart.

* SSH: ``ssh -o BatchMode=yes {host} denpex probe --stream --json``, one per host, with the
  user's own ssh config and agent (BatchMode: a node that wants a password fails, never prompts).
* Kubernetes: ``kubectl exec {host} -- denpex probe --stream --json``, one per pod.
* Slurm: one step for the whole job, ``srun --jobid J --overlap --ntasks-per-node=1 --nodes=N
  --nodelist=... --label denpex probe --stream --json`` (the node list from
  ``scontrol show job J``), demultiplexed by srun's ``N: `` task labels; a node whose task
  dies is retried alone with a one-node step.
* ``--probe-cmd TEMPLATE``: any of these replaced by the user's own shell command, one per host,
  ``{host}`` substituted and shell-quoted by ``core.commands.render_probe_command``.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from denpex_tui.core.commands import TemplateError, check_host, render_probe_command

REMOTE = ["denpex", "probe", "--stream", "--json"]
SSH_TEMPLATE = "ssh -o BatchMode=yes {host} denpex probe --stream --json"
KUBECTL_TEMPLATE = "kubectl exec {host} -- denpex probe --stream --json"
_JOBID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?(\+[0-9]{1,6})?$")


class TransportError(ValueError):
    """Bad input (a host, a job id, a template): one line for the user, exit 2."""


@dataclass
class ChannelSpec:
    label: str  # what it is, for status lines: "ssh n1", "srun step of job 12"
    argv: list[str]
    nodes: list[str]
    labelled: bool = False  # lines are "TASK: text" (srun --label), task i is nodes[i]
    retry_one: "object" = None  # node -> ChannelSpec: a node of a labelled step, alone
    env: dict[str, str] | None = field(default=None, repr=False)


def parse_hosts(text: str) -> list[str]:
    """``a,b,c`` (spaces allowed): each a host name; duplicates dropped, order kept."""
    out: list[str] = []
    for part in str(text).replace(" ", ",").split(","):
        if not part:
            continue
        try:
            out.append(check_host(part))
        except TemplateError as e:
            raise TransportError(f"--hosts: {e}") from None
    if not out:
        raise TransportError("--hosts: no host given")
    return list(dict.fromkeys(out))


def template_channels(hosts: list[str], template: str, kind: str = "cmd") -> list[ChannelSpec]:
    out = []
    for h in hosts:
        try:
            cmd = render_probe_command(template, h)
        except TemplateError as e:
            raise TransportError(str(e)) from None
        out.append(ChannelSpec(f"{kind} {h}", ["/bin/sh", "-c", cmd], [h]))
    return out


def ssh_channels(hosts: list[str], template: str | None = None) -> list[ChannelSpec]:
    return template_channels(hosts, template or SSH_TEMPLATE, "ssh")


def kubectl_channels(pods: list[str], template: str | None = None) -> list[ChannelSpec]:
    return template_channels(pods, template or KUBECTL_TEMPLATE, "kubectl")


# -- Slurm --------------------------------------------------------------------------------------


def check_jobid(job: str) -> str:
    j = str(job).strip()
    if not _JOBID.match(j):
        raise TransportError(f"--slurm-job: not a Slurm job id: {j[:40]!r}")
    return j


def _run(argv: list[str], timeout: float) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise TransportError(f"{argv[0]} not found: is this a Slurm login or head node?") from None
    except subprocess.TimeoutExpired:
        raise TransportError(f"{' '.join(argv[:3])}: no answer in {timeout:g} s (slurmctld down?)") from None
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise TransportError(f"{' '.join(argv[:3])}: {msg[:200]}")
    return r.stdout


def slurm_job_nodes(job: str, timeout: float = 20.0) -> tuple[list[str], str, str]:
    """(node names, compact node list, job state) of a job, from ``scontrol show job J``; the
    list expanded by ``scontrol show hostnames`` (Slurm's own hostlist syntax)."""
    job = check_jobid(job)
    text = _run(["scontrol", "show", "job", job], timeout)
    state = re.search(r"\bJobState=(\S+)", text)
    nl = re.search(r"(?:^|\s)NodeList=(\S+)", text)
    st = state.group(1) if state else "?"
    if nl is None or nl.group(1) in ("(null)", ""):
        raise TransportError(f"--slurm-job {job}: no nodes allocated (state {st})")
    compact = nl.group(1)
    names = [n.strip() for n in _run(["scontrol", "show", "hostnames", compact], timeout).split()]
    try:
        names = [check_host(n) for n in names if n]
    except TemplateError as e:
        raise TransportError(f"--slurm-job {job}: {e}") from None
    if not names:
        raise TransportError(f"--slurm-job {job}: empty node list {compact[:80]!r}")
    return names, compact, st


def slurm_job_output(job: str, timeout: float = 20.0) -> list[str]:
    """The job's own output files (``StdOut=``/``StdErr=`` of ``scontrol show job``) that exist
    here: the logs ``watch --slurm-job J`` follows when given no PATH."""
    import os

    job = check_jobid(job)
    text = _run(["scontrol", "show", "job", job], timeout)
    out = []
    for key in ("StdOut", "StdErr"):
        m = re.search(rf"(?:^|\s){key}=(\S+)", text)
        if m and os.path.isabs(m.group(1)) and os.path.isfile(m.group(1)):
            out.append(m.group(1))
    return list(dict.fromkeys(out))


def slurm_one_node(job: str, node: str, remote: list[str] | None = None) -> ChannelSpec:
    return ChannelSpec(f"srun {node}", ["srun", "--jobid", job, "--overlap", "--nodes=1",
                                        "--ntasks=1", "--ntasks-per-node=1", f"--nodelist={node}",
                                        "--quiet", *(remote or REMOTE)], [node])


def slurm_channels(job: str, template: str | None = None, *, remote: list[str] | None = None,
                   nodes: tuple[list[str], str, str] | None = None) -> list[ChannelSpec]:
    job = check_jobid(job)
    names, compact, _state = nodes if nodes is not None else slurm_job_nodes(job)
    if template:
        return template_channels(names, template, "cmd")
    argv = ["srun", "--jobid", job, "--overlap", "--ntasks-per-node=1", f"--nodes={len(names)}",
            f"--ntasks={len(names)}", f"--nodelist={compact}", "--label", "--kill-on-bad-exit=0",
            "--quiet", *(remote or REMOTE)]
    return [ChannelSpec(f"srun step of job {job}", argv, names, labelled=True,
                        retry_one=lambda n: slurm_one_node(job, n, remote))]


__all__ = ["ChannelSpec", "TransportError", "parse_hosts", "template_channels", "ssh_channels",
           "kubectl_channels", "slurm_channels", "slurm_job_nodes", "slurm_one_node",
           "slurm_job_output", "check_jobid", "SSH_TEMPLATE", "KUBECTL_TEMPLATE", "REMOTE"]
