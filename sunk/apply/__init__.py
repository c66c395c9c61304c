"""Carrying out the plans through the two ports, Kubernetes and Slurm."""
