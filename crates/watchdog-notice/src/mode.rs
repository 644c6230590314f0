//! What the config says about notices: `notice` (`auto|gce|aws|azure|off`),
//! `notice_endpoint` and `notice_interval`, and the one decision they make together with the
//! DMI: which provider to ask, or none.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use crate::dmi::{Provider, detect};
use crate::poll::NoticePoller;

/// How often the notice is asked by default: AWS recommends every 5 s, and 5 s is a sixth
/// of the shortest notice (30 s on GCE and Azure).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// Which provider's notice to ask for (config `notice`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The provider the DMI names, or none.
    #[default]
    Auto,
    /// GCE, whatever the DMI says.
    Gce,
    /// AWS, whatever the DMI says.
    Aws,
    /// Azure, whatever the DMI says.
    Azure,
    /// Never ask.
    Off,
}

impl Mode {
    /// The mode as the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Gce => "gce",
            Mode::Aws => "aws",
            Mode::Azure => "azure",
            Mode::Off => "off",
        }
    }

    /// The provider to ask: the one named, the one the DMI under `dmi_root` names for
    /// `auto`, or none.
    pub fn provider(self, dmi_root: &Path) -> Option<Provider> {
        match self {
            Mode::Auto => detect(dmi_root),
            Mode::Gce => Some(Provider::Gce),
            Mode::Aws => Some(Provider::Aws),
            Mode::Azure => Some(Provider::Azure),
            Mode::Off => None,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `notice` value that is none of the five.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid notice '{value}': expected auto, gce, aws, azure or off")]
pub struct ModeError {
    /// The value given.
    pub value: String,
}

impl FromStr for Mode {
    type Err = ModeError;

    fn from_str(s: &str) -> Result<Mode, ModeError> {
        match s {
            "auto" => Ok(Mode::Auto),
            "gce" => Ok(Mode::Gce),
            "aws" => Ok(Mode::Aws),
            "azure" => Ok(Mode::Azure),
            "off" => Ok(Mode::Off),
            _ => Err(ModeError {
                value: s.to_owned(),
            }),
        }
    }
}

/// A `notice_endpoint` that is not a plain-HTTP base URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid notice_endpoint '{value}': expected a base URL like http://127.0.0.1:8080")]
pub struct EndpointError {
    /// The value given.
    pub value: String,
}

/// Checks a `notice_endpoint`: `http://HOST[:PORT]`, no path, query or user; a trailing `/`
/// is dropped. HTTPS is refused: no metadata server speaks it, and this crate has no TLS.
pub fn parse_endpoint(value: &str) -> Result<String, EndpointError> {
    let bad = || EndpointError {
        value: value.to_owned(),
    };
    let rest = value.strip_prefix("http://").ok_or_else(bad)?;
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.is_empty()
        || host
            .chars()
            .any(|c| matches!(c, '/' | '?' | '#' | '@') || c.is_whitespace() || c.is_control())
    {
        return Err(bad());
    }
    // What the HTTP client will parse at the first request, parsed now: a bracket left
    // open, a port past 65535.
    let uri: ureq::http::Uri = format!("http://{host}/").parse().map_err(|_| bad())?;
    let authority = uri.authority().ok_or_else(bad)?;
    let text = authority.as_str();
    let after_host = text.rfind(']').map_or(text, |i| &text[i + 1..]);
    let port_ok = after_host
        .rsplit_once(':')
        .is_none_or(|(_, port)| port.parse::<u16>().is_ok());
    if authority.host().is_empty() || !port_ok {
        return Err(bad());
    }
    Ok(format!("http://{host}"))
}

/// The three notice settings of the config, with their defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoticeSettings {
    /// `notice`.
    pub mode: Mode,
    /// `notice_endpoint`: a base URL replacing the provider's (checked by [`parse_endpoint`]).
    pub endpoint: Option<String>,
    /// `notice_interval`.
    pub interval: Duration,
}

impl Default for NoticeSettings {
    fn default() -> NoticeSettings {
        NoticeSettings {
            mode: Mode::Auto,
            endpoint: None,
            interval: DEFAULT_INTERVAL,
        }
    }
}

impl NoticeSettings {
    /// The provider to ask and the base URL to ask it at, or `None`: nothing is asked.
    pub fn target(&self, dmi_root: &Path) -> Option<(Provider, String)> {
        let provider = self.mode.provider(dmi_root)?;
        let base = self
            .endpoint
            .clone()
            .unwrap_or_else(|| provider.default_base_url().to_owned());
        Some((provider, base))
    }

    /// Starts polling the provider's notice, or returns `None` without contacting any
    /// address when there is no provider to ask (`off`, or `auto` on a machine whose DMI
    /// under `dmi_root` names none).
    pub fn start(&self, dmi_root: &Path) -> Option<NoticePoller> {
        let (provider, base) = self.target(dmi_root)?;
        Some(NoticePoller::start(provider, &base, self.interval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_and_a_bad_one_says_what_was_expected() {
        for mode in [Mode::Auto, Mode::Gce, Mode::Aws, Mode::Azure, Mode::Off] {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
        }
        let err = "ec2".parse::<Mode>().expect_err("not a mode");
        assert_eq!(
            err.to_string(),
            "invalid notice 'ec2': expected auto, gce, aws, azure or off"
        );
        assert!("Auto".parse::<Mode>().is_err(), "spelled one way only");
    }

    #[test]
    fn endpoints_are_plain_http_bases() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:8080/").as_deref(),
            Ok("http://127.0.0.1:8080")
        );
        assert_eq!(
            parse_endpoint("http://[::1]:80").as_deref(),
            Ok("http://[::1]:80")
        );
        for bad in [
            "127.0.0.1:8080",
            "https://169.254.169.254",
            "http://",
            "http://host/path",
            "http://user@host",
            "http://host?x",
            "http://[::1",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:x",
            "http://:80",
        ] {
            let err = parse_endpoint(bad).expect_err(bad);
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid notice_endpoint '{bad}': expected a base URL like http://127.0.0.1:8080"
                )
            );
        }
    }

    #[test]
    fn off_asks_no_one_and_named_modes_ignore_the_dmi() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(Mode::Off.provider(dir.path()), None);
        assert_eq!(Mode::Auto.provider(dir.path()), None);
        assert_eq!(Mode::Azure.provider(dir.path()), Some(Provider::Azure));
        let settings = NoticeSettings {
            mode: Mode::Aws,
            endpoint: Some("http://127.0.0.1:9".into()),
            ..NoticeSettings::default()
        };
        assert_eq!(
            settings.target(dir.path()),
            Some((Provider::Aws, "http://127.0.0.1:9".into()))
        );
        assert_eq!(NoticeSettings::default().interval, Duration::from_secs(5));
    }
}
