"""Operations: API-key auth, body limits, the per-request context middleware, keep-alives
and deadlines, Prometheus metrics. Surface-neutral; imports no surface."""
