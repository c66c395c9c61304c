"""Fixtures shared by every test. The real test bed is started lazily, by the e2e fixtures."""
