"""The hook API that Slurm's prolog, epilog and placeholder job call."""
