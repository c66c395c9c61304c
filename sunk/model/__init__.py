"""What sunk knows of Kubernetes and Slurm, and the watches that keep it fresh."""
