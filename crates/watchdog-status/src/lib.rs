//! `watchdog-status`: the service's status socket, named for `watchdog status`, its client.
//!
//! The status socket of a running watchdog: `watchdog status` asks what is watched, and
//! `training_watchdog.install()` registers a run with the daemon. One JSON line in, one
//! JSON line out; the peer's credentials decide what it may see and register.
//!
//! Public API:
//! - [`protocol::Request`] (`parse`, `encode`) and [`protocol::Response`] (`encode`,
//!   `decode`, `error`), with [`protocol::Registration`]: the wire format, its one owner.
//! - [`server::StatusServer`] (`bind`, `serve`) and [`server::ServerHandle`] (`stop`, or
//!   drop): the socket and its accept loop; [`server::Peer`] (`SO_PEERCRED`);
//!   [`server::visible_to`] (root sees every run, others their own);
//!   [`server::may_register`] (own process or an ancestor, owned by the peer; root anything).
//! - [`client::query`]: one request, one answer, with a timeout and one-line errors.
//! - [`render::text`] and [`render::json`]: what `watchdog status [--json]` prints.
//!
//! The protocol and the rules are described for users in `docs/status.md`.
#![deny(missing_docs)]

pub mod client;
pub mod intake;
pub mod protocol;
pub mod render;
pub mod server;
