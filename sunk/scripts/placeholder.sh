#!/bin/sh
# Batch script of the placeholder job sunk submits for each Pod. Shipped with sunk, installed
# on every Slurm node.
#
# Placeholder: the scheduling issue fills it in (append ": started" to the job's extra, then
# block on the hook API until the Pod is gone).
exec sleep infinity
