"""What to do, decided on plain data (pure): the scheduler's and the syncer's plans."""
