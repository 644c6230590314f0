//! Prometheus metrics: the watched figures as text exposition, served at `/metrics`.
