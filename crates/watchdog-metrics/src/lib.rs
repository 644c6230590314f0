//! `watchdog-metrics`: the watched figures as Prometheus metrics, served at `/metrics`.
//!
//! Public API:
//! - [`exposition::render`]`(&WatchStatus) -> String`: the Prometheus text format (0.0.4) of
//!   one status snapshot ([`exposition::CONTENT_TYPE`] is its content type).
//! - [`server::MetricsServer::bind`]`(addr)` parses `PORT`, `HOST:PORT` or `[IPv6]:PORT`
//!   (no host means 127.0.0.1) and binds it, with a one-line error otherwise;
//!   [`server::MetricsServer::serve`]`(snapshot)` serves `GET /metrics` on a thread of its
//!   own and returns a [`server::MetricsHandle`], which stops the server when stopped or
//!   dropped. [`server::parse_addr`] is the parsing alone, for checking `--metrics` early.
//!
//! Every metric, its unit and labels are documented in `docs/metrics.md`.
#![deny(missing_docs)]

pub mod exposition;
pub mod server;
