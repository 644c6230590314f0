//! `watchdog-notice`: the cloud's preemption notice. Which provider a VM is on, read from
//! its DMI strings, and that provider's metadata server asked for a notice of the VM's end,
//! on a thread of its own.
//!
//! A spot or preemptible VM is told ahead that it will be taken back: GCE says
//! `instance/preempted` = `TRUE` 30 s before power-off, AWS puts `spot/instance-action` two
//! minutes before, Azure lists a `Preempt` scheduled event at least 30 s before. The
//! watchdog turns such a notice into a save with the provider's deadline; this crate only
//! finds the notice and says it once ([`NoticePoller::news`]).
//!
//! - [`detect`] reads `<root>/sys/class/dmi/id/{product_name,sys_vendor,chassis_asset_tag}`
//!   through a root a test points at fixtures; [`Mode`] (`auto|gce|aws|azure|off`) and
//!   [`NoticeSettings::start`] decide whether anything is asked at all: on a machine whose DMI
//!   names no provider and whose config does not ask, nothing is, and no address is contacted.
//! - The answers are parsed by pure functions ([`parse_gce_preempted`],
//!   [`parse_gce_maintenance_event`], [`parse_aws_instance_action`],
//!   [`parse_azure_scheduled_events`]) tested with the bodies the providers document.
//! - [`Asker`] asks once (one or two HTTP requests), with a typed [`NoticeError`];
//!   [`NoticePoller`] asks every interval on its own thread, never blocks its caller and is
//!   stopped by being dropped, without a join.
//!
//! HTTP: `ureq` 3 with its default features off (no TLS, no gzip: the metadata servers speak
//! plain HTTP on a link-local address), blocking, on the poller's thread. Every request has a
//! 1 s connect timeout and a 2 s total timeout, reads at most 64 KiB of body, follows no
//! redirect (a 3xx is an unexpected answer), and never goes through a proxy (ureq otherwise
//! reads `HTTP_PROXY` from the environment; a proxy would both leak the request and, on
//! Azure, be refused). A hand-written HTTP/1.1 client over `TcpStream` was the alternative;
//! ureq is small with this feature set (ureq, ureq-proto, http, httparse, base64,
//! percent-encoding, utf8-zero: about 5 s of build), well kept, builds from crates.io alone,
//! and its timeouts cover every phase.
//!
//! Default address: `http://169.254.169.254` for all three providers. AWS and Azure document
//! only that address; GCE documents both `metadata.google.internal` and `169.254.169.254`,
//! and the literal is chosen so that no DNS lookup happens (a resolver that hangs is outside
//! the connect timeout, and a container's resolver may not know the internal name); Google's
//! own Go client (`cloud.google.com/go/compute/metadata`) uses the literal for the same
//! reason. `notice_endpoint` overrides the base for every provider (tests use
//! `http://127.0.0.1:PORT`).
//!
//! Sources, per provider: `docs/notices.md`.

#![deny(missing_docs)]

mod answer;
mod ask;
mod dmi;
mod mode;
mod poll;

pub use answer::{
    AnswerError, GCE_MAINTENANCE_NOTICE, GCE_PREEMPT_NOTICE, Notice, parse_aws_instance_action,
    parse_azure_scheduled_events, parse_gce_maintenance_event, parse_gce_preempted,
};
pub use ask::{Asker, CONNECT_TIMEOUT, MAX_BODY_BYTES, NoticeError, TOTAL_TIMEOUT};
pub use dmi::{
    AWS_SYS_VENDOR, AZURE_CHASSIS_ASSET_TAG, GCE_PRODUCT_NAME, Provider, detect, detect_from,
};
pub use mode::{DEFAULT_INTERVAL, EndpointError, Mode, ModeError, NoticeSettings, parse_endpoint};
pub use poll::{News, NoticePoller};
