"""A real local cluster for sunk's tests and demo.

etcd + kube-apiserver (built from Go modules), kwok standing in for kubelets, and a real Slurm
(munge, MariaDB and slurmdbd for accounting, slurmctld, one slurmd per node, slurmrestd with JWT)
from a cached Debian chroot, all as plain processes on 127.0.0.1.
``python -m testbed up | down | status``.
"""
