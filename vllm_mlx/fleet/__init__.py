"""Several models from one server: the catalog of servable models (``--models-dir``,
``models.toml``), their per-model settings, and the pool that loads them on demand and
unloads them when idle. No HTTP here: the server maps the pool's errors to its APIs."""
