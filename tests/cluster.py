"""A real Slurm cluster and a real sshd on loopback, for the multi-node tests and benchmark.

Slurm: Debian's munged, slurmctld and one slurmd per emulated node (`slurmd -N nodeK`, each on its own port),
all on 127.0.0.1 as root, state and sockets in a scratch folder. The emulated nodes share this machine's pid
space and hostname; Slurm tells them apart by SLURMD_NODENAME and by which slurmd runs a step. Daemons detach,
so they are stopped by the pids they wrote. sshd: key-only, on a free port, with its own host key and a
known_hosts and ssh_config that the server is given (GPU_TRIAGE_SSH_CONFIG).

Nothing here is faked: these are the programs a cluster runs. `.ci/run` (scripts/test.sh) installs them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import pid_alive

__all__ = ["SlurmCluster", "Sshd", "free_port", "slurm_cluster", "sshd"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(pid_file: Path, *, timeout_s: float = 10.0) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGCONT)  # a test may have stopped it
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pid_alive(pid):  # a daemon's parent is init, which may leave it a zombie: that counts as gone
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    nodes: list[str]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=dict(os.environ, **self.env), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def slurmd_pid(self, node: str) -> int:
        return int((self.dir / f"slurmd.{node}.pid").read_text().split()[0])

    def submit(self, script: Path, *args: str, output: Path) -> str:
        done = self.run("sbatch", "--parsable", "-o", str(output), *args, str(script))
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        out = self.run("scontrol", "show", "job", "-o", job).stdout
        return next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")

    def wait_running(self, job: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while self.state(job) != "RUNNING":
            assert time.monotonic() < deadline, f"job {job} is {self.state(job)}, not RUNNING"
            time.sleep(0.2)


@contextlib.contextmanager
def slurm_cluster(work: Path, nodes: int = 2, cpus_per_node: int = 8) -> Iterator[SlurmCluster]:
    """munged + slurmctld + `nodes` slurmd on loopback; every daemon stopped by pid on exit."""
    work.mkdir(parents=True, exist_ok=True)
    # munged refuses a socket whose folders others cannot search, and pytest's tmp folders are 0700.
    munge = Path(tempfile.mkdtemp(prefix="gpu-triage-munge-"))
    munge.chmod(0o755)
    subprocess.run(["mungekey", "-c", "-k", str(munge / "munge.key")], check=True, capture_output=True)
    (munge / "munge.key").chmod(0o600)
    names = [f"node{k}" for k in range(1, nodes + 1)]
    ctld_port = free_port()
    node_lines = "\n".join(
        f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} CPUs={cpus_per_node} "
        "State=UNKNOWN" for name in names)
    conf = work / "slurm.conf"
    conf.write_text(f"""ClusterName=lab
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}/sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool.%n
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd.%n.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd.%n.log
{node_lines}
PartitionName=lab Nodes={",".join(names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    pid_files = [munge / "pid", work / "slurmctld.pid", *(work / f"slurmd.{n}.pid" for n in names)]
    try:
        subprocess.run(["munged", f"--socket={munge}/sock", f"--key-file={munge}/munge.key",
                        f"--pid-file={munge}/pid", f"--log-file={munge}/log", f"--seed-file={munge}/seed"],
                       check=True, capture_output=True)
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env, capture_output=True)
        for name in names:
            subprocess.run(["slurmd", "-f", str(conf), "-N", name], check=True, env=env, capture_output=True)
        cluster = SlurmCluster(work, conf, names)
        deadline = time.monotonic() + 30
        while True:
            states = cluster.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
            if sum(1 for line in states if line.endswith(" idle")) == nodes:
                break
            assert time.monotonic() < deadline, f"Slurm nodes not idle: {states} {(work / 'slurmctld.log')}"
            time.sleep(0.1)
        yield cluster
    finally:
        subprocess.run(["scancel", "--full", "--partition=lab"], env=env, capture_output=True, check=False)
        for pid_file in reversed(pid_files):
            _stop(pid_file)
        shutil.rmtree(munge, ignore_errors=True)


@dataclass
class Sshd:
    port: int
    config: Path  # the client's ssh_config: identity, known_hosts


@contextlib.contextmanager
def sshd(work: Path) -> Iterator[Sshd]:
    """A key-only sshd on 127.0.0.1 and a free port, root login by key only; stopped by pid on exit."""
    work.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / key)], check=True)
    (work / "authorized_keys").write_text((work / "user_key.pub").read_text())
    (work / "authorized_keys").chmod(0o600)
    port = free_port()
    (work / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {work}/host_key
PidFile {work}/sshd.pid
AuthorizedKeysFile {work}/authorized_keys
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers root
UsePAM no
StrictModes no
""")
    host_key = (work / "host_key.pub").read_text().split()
    (work / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (work / "ssh_config").write_text(f"""Host *
  IdentityFile {work}/user_key
  IdentitiesOnly yes
  UserKnownHostsFile {work}/known_hosts
  StrictHostKeyChecking yes
""")
    subprocess.run(["/usr/sbin/sshd", "-f", str(work / "sshd_config"), "-E", str(work / "sshd.log")], check=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, (work / "sshd.log").read_text()
            time.sleep(0.05)
        yield Sshd(port, work / "ssh_config")
    finally:
        _stop(work / "sshd.pid")
