"""Slurm, as sunk sees it.

:mod:`sunk.slurm.client` is the only module that speaks to slurmrestd (it loads httpx and
aiohttp); :mod:`sunk.slurm.job` (a job's record, and whose Pod it is) and
:mod:`sunk.slurm.text` (what Slurm's words mean) are pure. This module imports none of them, so
pure code may import ``sunk.slurm.job`` without loading an HTTP client.
"""
