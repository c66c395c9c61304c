"""Slurm accounting in the test bed: MariaDB and slurmdbd in the chroot, started before
slurmctld and stopped by ``down`` like every other part.

A bed starts on its own copy of a template database (in the bed's state directory, bind-mounted
at slurmconf.MARIADB_DATA), so its records start empty, as its Slurm state does. The template is
made once per chroot and template key (the cold path: mariadb-install-db, the database, and
testbed.accounts' sacctmgr setup, about 3 s here) and kept in the chroot, so a rebuilt chroot (a
new MariaDB) makes a new one; a bed's start then copies it (82 MB) and starts the two daemons
(about 1 s).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from testbed import accounts, procs, slurmconf
from testbed.build import say
from testbed.errors import TestbedError

if TYPE_CHECKING:
    from testbed.cluster import Testbed

#: Where templates are kept, inside the chroot (relative to its root).
TEMPLATES = "var/lib/sunk-accounting-templates"


def template_key() -> str:
    """Changes whenever a template made now would differ: MariaDB's settings, its first SQL, or
    the sacctmgr setup."""
    text = "\n".join([slurmconf.mariadb_conf(), slurmconf.MARIADB_INIT_SQL,
                      *(" ".join(cmd) for cmd in accounts.setup_commands())])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def start(tb: Testbed) -> None:
    """MariaDB, then slurmdbd on a copy of the template (made first if missing)."""
    _write_config(tb)
    template = Path(tb.chroot) / TEMPLATES / template_key()
    if not template.exists():
        _make_template(tb, template)
    live = tb.path / "accounting"
    procs.run(["cp", "-a", "--reflink=auto", str(template), str(live)],
              what="copying the accounting database")
    _mount_data(tb, live)
    _start_mariadb(tb)
    _start_slurmdbd(tb)


def wait_registered(tb: Testbed) -> None:
    """Until slurmctld has registered with slurmdbd (slurmdbd lists its port)."""
    want = f"{accounts.CLUSTER}|{tb.ports['slurmctld']}"

    def registered() -> bool:
        return want in tb.slurm("sacctmgr", "-n", "-P", "show", "cluster",
                                "format=cluster,controlport", timeout=10).split()

    procs.wait_for(registered, what="slurmctld's registration with slurmdbd", timeout=30,
                   log=tb.log("slurmctld"), pid=tb.pids["slurmctld"])


def slurmdbd_serves(tb: Testbed) -> bool:
    """slurmdbd answers sacctmgr (it has reached MariaDB, and munge lets us in)."""
    tb.slurm("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster", timeout=10)
    return True


def setup(tb: Testbed) -> None:
    """Run testbed.accounts' sacctmgr setup against slurmdbd, then check what it lists: safe to
    run again (what exists is left as it is)."""
    for cmd in accounts.setup_commands():
        out = subprocess.run(tb.chroot_cmd("sacctmgr", "-i", *cmd), capture_output=True,
                             text=True, timeout=60)
        text = out.stdout + out.stderr
        if out.returncode != 0 and not accounts.nothing_new(cmd, out.returncode, text):
            last = text.strip().splitlines()[-1:] or [f"exit {out.returncode}"]
            raise TestbedError(f"sacctmgr {' '.join(cmd)} failed: {last[0]}")
    show = [tb.slurm("sacctmgr", "-n", "-P", *args)
            for args in (accounts.SHOW_ASSOCIATIONS, accounts.SHOW_QOS, accounts.SHOW_USERS)]
    if problems := accounts.differences(*show):
        raise TestbedError("Slurm accounting is not as set up: " + "; ".join(problems))


def _write_config(tb: Testbed) -> None:
    root = Path(tb.chroot)
    uid, gid = tb.chroot_ids("mysql")
    run = root / slurmconf.MARIADB_RUN.lstrip("/")
    run.mkdir(parents=True, exist_ok=True)
    shutil.chown(run, uid, gid)
    (root / slurmconf.MARIADB_CONF.lstrip("/")).write_text(slurmconf.mariadb_conf())
    conf = root / slurmconf.ETC.lstrip("/") / "slurmdbd.conf"
    conf.write_text(slurmconf.slurmdbd_conf(port=tb.ports["slurmdbd"]))
    conf.chmod(0o600)  # slurmdbd refuses a slurmdbd.conf others may read


def _mount_data(tb: Testbed, source: Path) -> None:
    point = Path(tb.chroot) / slurmconf.MARIADB_DATA.lstrip("/")
    point.mkdir(parents=True, exist_ok=True)
    procs.run(["mount", "--bind", str(source), str(point)], what=f"mounting {point}")


def _unmount_data(tb: Testbed) -> None:
    point = Path(tb.chroot) / slurmconf.MARIADB_DATA.lstrip("/")
    procs.run(["umount", str(point)], what=f"unmounting {point}")


def _sql(tb: Testbed, sql: str) -> str:
    """Run SQL as MariaDB's root (the OS user root, by its socket)."""
    return procs.run(tb.chroot_cmd("mariadb", f"--defaults-file={slurmconf.MARIADB_CONF}",
                                   "-u", "root", "-N", "-e", sql), what="mariadb", timeout=30)


def _start_mariadb(tb: Testbed, log: str = "mariadb") -> None:
    tb.pids["mariadb"] = procs.start(
        tb.chroot_cmd("mariadbd", f"--defaults-file={slurmconf.MARIADB_CONF}",
                      user="mysql:mysql"), tb.log(log))
    tb.save()
    procs.wait_for(lambda: _sql(tb, "SELECT 1").strip() == "1", what="MariaDB", timeout=60,
                   log=tb.log(log), pid=tb.pids["mariadb"])


def _start_slurmdbd(tb: Testbed, log: str = "slurmdbd") -> None:
    tb.cmds["slurmdbd"] = tb.chroot_cmd("slurmdbd", "-D")
    tb.pids["slurmdbd"] = procs.start(tb.cmds["slurmdbd"], tb.log(log))
    tb.save()
    procs.wait_for(lambda: slurmdbd_serves(tb), what="slurmdbd", timeout=60, log=tb.log(log),
                   pid=tb.pids["slurmdbd"])


def _make_template(tb: Testbed, template: Path) -> None:
    """The cold path: a new data directory with the database, slurmdbd's tables and the bed's
    accounts, both daemons stopped cleanly (their files are copied as they are)."""
    say("making the accounting database: MariaDB, slurmdbd and sacctmgr setup "
        "(first run with this chroot: a few seconds)")
    uid, gid = tb.chroot_ids("mysql")
    tmp = template.with_name(template.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    shutil.chown(tmp, uid, gid)
    tmp.chmod(0o700)
    _mount_data(tb, tmp)
    try:
        procs.run(tb.chroot_cmd("mariadb-install-db", f"--defaults-file={slurmconf.MARIADB_CONF}",
                                "--auth-root-authentication-method=socket", "--skip-test-db",
                                user="mysql:mysql"),
                  what="mariadb-install-db", timeout=300)
        _start_mariadb(tb, log="mariadb-template")
        _sql(tb, slurmconf.MARIADB_INIT_SQL)
        _start_slurmdbd(tb, log="slurmdbd-template")
        setup(tb)
    finally:
        # slurmdbd first (it writes to MariaDB); MariaDB's clean stop takes a few seconds.
        for name in ("slurmdbd", "mariadb"):
            if name in tb.pids:
                procs.stop([tb.pids.pop(name)], timeout=60)
        tb.save()
        _unmount_data(tb)
    for old in template.parent.iterdir():
        if old != tmp:
            shutil.rmtree(old)
    tmp.rename(template)
