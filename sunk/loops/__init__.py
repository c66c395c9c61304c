"""The loops that run for the life of the process: work queues, watches, the lease."""
