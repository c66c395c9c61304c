"""The process itself: its servers, background tasks, metrics, memory and profiles."""
