"""Release artefacts: the scheduler's OCI image (``make image``) and its Helm chart
(``make chart``), both versioned from ``pyproject.toml``."""
