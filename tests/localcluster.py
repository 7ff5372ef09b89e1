"""Real engines on this machine for the multi-node tests: an OpenSSH server on 127.0.0.1 with a
throwaway key and several host aliases, and a Slurm cluster (munged, slurmctld, one slurmd per
node name, all on 127.0.0.1) whose node names are several, so ``srun`` runs real steps.

Everything lives in a temporary directory and listens on loopback only; each daemon is ended
by its own pid at the end. When a daemon cannot start here (not installed, not root for
slurmd), the fixture skips with the reason and the daemon's own last log lines.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

VENV_BIN = os.path.dirname(sys.executable)
DENPEX = os.path.join(VENV_BIN, "denpex")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout: float, what: str, step: float = 0.1):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _tail(path: str, n: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-n:])
    except OSError:
        return "(no log)"


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- OpenSSH --------------------------------------------------------------------------------


class LocalSSH:
    def __init__(self, root: str, aliases: list[str], dead: list[str]) -> None:
        self.root, self.aliases, self.dead = root, aliases, dead
        self.config = os.path.join(root, "ssh_config")
        self.proc: subprocess.Popen | None = None

    def template(self, remote: str) -> str:
        """A --probe-cmd for these aliases: the user's own ssh, our config file."""
        return f"ssh -F {self.config} -o BatchMode=yes {{host}} {remote}"


def start_sshd(root: str, aliases=("n1", "n2", "n3"), dead=("deadnode",)) -> LocalSSH:
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("OpenSSH server/client not installed (apt-get install openssh-server openssh-client)")
    os.makedirs(root, exist_ok=True)
    hostkey, userkey = os.path.join(root, "host_ed25519"), os.path.join(root, "user_ed25519")
    for k in (hostkey, userkey):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k], check=True,
                       capture_output=True)
    auth = os.path.join(root, "authorized_keys")
    shutil.copy(userkey + ".pub", auth)
    os.chmod(auth, 0o600)
    port, closed = free_port(), free_port()
    log = os.path.join(root, "sshd.log")
    with open(os.path.join(root, "sshd_config"), "w") as f:
        f.write(f"""ListenAddress 127.0.0.1:{port}
HostKey {hostkey}
PidFile {root}/sshd.pid
AuthorizedKeysFile {auth}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding no
X11Forwarding no
PrintMotd no
""")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # its privilege-separation directory
    with open(hostkey + ".pub") as f:
        hk = f.read().split()
    with open(os.path.join(root, "known_hosts"), "w") as f:
        f.write(f"[127.0.0.1]:{port} {hk[0]} {hk[1]}\n")
    user = getpass.getuser()
    with open(os.path.join(root, "ssh_config"), "w") as f:
        f.write(f"""Host {' '.join(aliases)}
    HostName 127.0.0.1
    Port {port}
Host {' '.join(dead)}
    HostName 127.0.0.1
    Port {closed}
Host *
    User {user}
    IdentityFile {userkey}
    IdentitiesOnly yes
    UserKnownHostsFile {root}/known_hosts
    StrictHostKeyChecking yes
    ConnectTimeout 5
    LogLevel ERROR
""")
    s = LocalSSH(root, list(aliases), list(dead))
    s.proc = subprocess.Popen([sshd, "-D", "-e", "-f", os.path.join(root, "sshd_config")],
                              stdout=subprocess.DEVNULL, stderr=open(log, "w"))

    def answers():
        if s.proc.poll() is not None:
            return "dead"
        r = subprocess.run(["ssh", "-F", s.config, "-o", "BatchMode=yes", aliases[0], "true"],
                           capture_output=True, timeout=20)
        return r.returncode == 0

    try:
        ok = wait_for(answers, 20, "sshd on 127.0.0.1 to accept our key", step=0.3)
    except AssertionError:
        ok = False
    if ok != True:  # noqa: E712
        stop_sshd(s)
        pytest.skip(f"sshd could not start on 127.0.0.1:{port}: {_tail(log)}")
    return s


def stop_sshd(s: LocalSSH) -> None:
    if s.proc is not None and s.proc.poll() is None:
        _end(s.proc.pid)
        s.proc.wait(timeout=5)


# -- Slurm ----------------------------------------------------------------------------------


class LocalSlurm:
    def __init__(self, root: str, nodes: list[str]) -> None:
        self.root, self.nodes = root, nodes
        self.conf = os.path.join(root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf,
                        PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
        self.pidfiles: list[str] = []
        self.jobs: list[str] = []

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def job(self, nodes: int | None = None) -> str:
        """A running job holding every node (a sleeping batch script), for srun --overlap."""
        n = nodes or len(self.nodes)
        for old in self.jobs:  # one test's job at a time: the nodes have 2 cores each
            self.run("scancel", old)
        r = self.run("sbatch", "--parsable", f"--nodes={n}", "--ntasks-per-node=1", "-o", "/dev/null",
                     "--wrap", "sleep 900")
        assert r.returncode == 0, r.stderr
        j = r.stdout.strip().split(";")[0]
        self.jobs.append(j)
        wait_for(lambda: "JobState=RUNNING" in self.run("scontrol", "show", "job", j).stdout,
                 60, f"job {j} to run")
        return j


def start_slurm(root: str, nodes=("n1", "n2", "n3")) -> LocalSlurm:
    need = ["munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol"]
    missing = [b for b in need if not (shutil.which(b) or os.path.exists(f"/usr/sbin/{b}"))]
    if missing:
        pytest.skip(f"Slurm not installed ({', '.join(missing)} missing: "
                    "apt-get install slurmctld slurmd munge slurm-client)")
    if os.geteuid() != 0:
        pytest.skip("a local Slurm needs root here (slurmd starts job steps as their user)")
    os.makedirs(root, exist_ok=True)
    run, log, spool, state = (os.path.join(root, d) for d in ("run", "log", "spool", "state"))
    for d in (run, log, spool, state):
        os.makedirs(d, exist_ok=True)
    key = os.path.join(root, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o600)
    sock = os.path.join(run, "munge.socket")
    s = LocalSlurm(root, list(nodes))
    munged = shutil.which("munged") or "/usr/sbin/munged"
    r = subprocess.run([munged, "-f", f"--socket={sock}", f"--key-file={key}",
                        f"--pid-file={run}/munged.pid", f"--log-file={log}/munged.log",
                        f"--seed-file={run}/munge.seed"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"munged could not start: {r.stderr.strip()[:200]}")
    s.pidfiles.append(f"{run}/munged.pid")
    ctld, sd = free_port(), free_port()
    node_ports = [free_port() for _ in nodes]
    host = socket.gethostname()
    lines = [f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs=2 "
             "RealMemory=500 State=UNKNOWN" for n, p in zip(nodes, node_ports)]
    with open(s.conf, "w") as f:
        f.write(f"""ClusterName=denpextest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={sd}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state}
SlurmdSpoolDir={spool}/%n
SlurmctldPidFile={run}/slurmctld.pid
SlurmdPidFile={run}/slurmd-%n.pid
SlurmctldLogFile={log}/slurmctld.log
SlurmdLogFile={log}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=60
{chr(10).join(lines)}
PartitionName=test Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    ctl = shutil.which("slurmctld") or "/usr/sbin/slurmctld"
    r = subprocess.run([ctl, "-f", s.conf], capture_output=True, text=True, env=s.env)
    s.pidfiles.append(f"{run}/slurmctld.pid")
    if r.returncode != 0:
        stop_slurm(s)
        pytest.skip(f"slurmctld could not start: {r.stderr.strip()[:200]} {_tail(log + '/slurmctld.log')}")
    sdbin = shutil.which("slurmd") or "/usr/sbin/slurmd"
    for n in nodes:
        r = subprocess.run([sdbin, "-f", s.conf, "-N", n], capture_output=True, text=True, env=s.env)
        s.pidfiles.append(f"{run}/slurmd-{n}.pid")
        if r.returncode != 0:
            stop_slurm(s)
            pytest.skip(f"slurmd -N {n} could not start: {r.stderr.strip()[:200]}")

    def idle():
        r = s.run("sinfo", "-h", "-o", "%t %D")
        return r.returncode == 0 and r.stdout.split()[:2] == ["idle", str(len(nodes))]

    try:
        wait_for(idle, 60, "the local Slurm nodes to be idle", step=0.5)
    except AssertionError:
        why = s.run("sinfo", "-h").stdout.strip()
        stop_slurm(s)
        pytest.skip(f"local Slurm nodes never became idle ({why}): {_tail(log + '/slurmctld.log')}")
    return s


def stop_slurm(s: LocalSlurm) -> None:
    for j in s.jobs:
        try:
            s.run("scancel", j, timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            pass
    for pf in reversed(s.pidfiles):
        try:
            with open(pf) as f:
                _end(int(f.read().strip()))
        except (OSError, ValueError):
            pass
