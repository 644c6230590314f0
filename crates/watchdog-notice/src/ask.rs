//! One question to a provider's metadata server, over HTTP with short timeouts: the
//! documented request(s), the status checked, the body bounded and handed to the pure
//! parsers. A question that gets no answer is a [`NoticeError`] the poller says once.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::answer::{
    AnswerError, Notice, parse_aws_instance_action, parse_azure_scheduled_events,
    parse_gce_maintenance_event, parse_gce_preempted,
};
use crate::dmi::Provider;

/// The longest wait for a TCP connection to the metadata server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest one request may take, connection, headers and body together.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(2);
/// The most bytes of one answer's body read (the documented answers are under 2 KiB).
pub const MAX_BODY_BYTES: u64 = 64 * 1024;

/// The IMDSv2 token's lifetime asked for, in seconds (the most AWS allows, 6 hours).
const AWS_TOKEN_TTL_S: u64 = 21_600;
/// A token is asked again this long before it expires.
const AWS_TOKEN_MARGIN: Duration = Duration::from_secs(60);

/// GCE's paths (`Metadata-Flavor: Google` on every request, checked on every answer).
const GCE_PREEMPTED: &str = "/computeMetadata/v1/instance/preempted";
const GCE_MAINTENANCE: &str = "/computeMetadata/v1/instance/maintenance-event";
/// AWS's paths.
const AWS_TOKEN: &str = "/latest/api/token";
const AWS_INSTANCE_ACTION: &str = "/latest/meta-data/spot/instance-action";
/// Azure's path: the scheduled events document, at the API version this parser follows.
const AZURE_EVENTS: &str = "/metadata/scheduledevents?api-version=2020-07-01";

/// Why the metadata server gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum NoticeError {
    /// No answer within the timeout.
    #[error("{url} did not answer within {timeout:?}")]
    Timeout {
        /// The URL asked.
        url: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// No connection, or it broke.
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// Why.
        message: String,
    },
    /// An answer longer than [`MAX_BODY_BYTES`].
    #[error("{url} answered more than {MAX_BODY_BYTES} bytes: not a metadata server's answer")]
    TooLong {
        /// The URL asked.
        url: String,
    },
    /// An HTTP status the provider does not document for this request.
    #[error("{url} answered HTTP {status}, expected {expected}")]
    Status {
        /// The URL asked.
        url: String,
        /// The status.
        status: u16,
        /// What was expected.
        expected: &'static str,
    },
    /// A GCE answer without `Metadata-Flavor: Google`: something else answered.
    #[error(
        "{url} answered without the header 'Metadata-Flavor: Google': not a GCE metadata server"
    )]
    NotGce {
        /// The URL asked.
        url: String,
    },
    /// A body that is not what the provider documents.
    #[error("{url}: {source}")]
    Answer {
        /// The URL asked.
        url: String,
        /// What was wrong with it.
        source: AnswerError,
    },
    /// The IMDSv2 token could not be had: no answer to the `PUT`.
    #[error(
        "the IMDSv2 token request (PUT {url}) {failure}; in a container on a bridge network the \
         likely cause is the instance's metadata hop limit (HttpPutResponseHopLimit 1 drops the \
         answer one hop early): raise it to 2 (aws ec2 modify-instance-metadata-options \
         --http-put-response-hop-limit 2) or use the host's network"
    )]
    AwsToken {
        /// The token URL.
        url: String,
        /// What happened (`did not answer within 2s`, `failed: Connection refused`).
        failure: String,
    },
}

/// One answer as read: status, body, and whether GCE's header was there.
struct Reply {
    status: u16,
    body: String,
    flavor_google: bool,
}

/// Asks one provider's metadata server for a notice; keeps AWS's token between questions.
#[derive(Debug)]
pub struct Asker {
    provider: Provider,
    base: String,
    agent: ureq::Agent,
    /// The IMDSv2 token and when to ask a new one.
    token: Option<(String, Instant)>,
}

impl Asker {
    /// An asker of `provider`'s server at `base_url` (`http://169.254.169.254`, or a test's
    /// `http://127.0.0.1:PORT`). Contacts nothing until [`Asker::ask`].
    pub fn new(provider: Provider, base_url: &str) -> Asker {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(TOTAL_TIMEOUT))
            // A 3xx is returned as is, and is an unexpected status: no redirect is followed.
            .max_redirects(0)
            .http_status_as_error(false)
            // Never through a proxy named in the environment: link-local is ours only.
            .proxy(None)
            .build();
        Asker {
            provider,
            base: base_url.trim_end_matches('/').to_owned(),
            agent: config.into(),
            token: None,
        }
    }

    /// The provider asked.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The base URL asked.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Asks once: the notice if the provider announces the VM's end, `None` if not.
    /// Blocks for at most the timeouts of its requests (GCE two, AWS up to three when the
    /// token must be renewed, Azure one).
    pub fn ask(&mut self) -> Result<Option<Notice>, NoticeError> {
        match self.provider {
            Provider::Gce => self.ask_gce(),
            Provider::Aws => self.ask_aws(),
            Provider::Azure => self.ask_azure(),
        }
    }

    fn ask_gce(&mut self) -> Result<Option<Notice>, NoticeError> {
        const FLAVOR: [(&str, &str); 1] = [("Metadata-Flavor", "Google")];
        for (path, parse) in [
            (
                GCE_PREEMPTED,
                parse_gce_preempted as fn(&str, f64) -> Result<Option<Notice>, AnswerError>,
            ),
            (GCE_MAINTENANCE, parse_gce_maintenance_event),
        ] {
            let url = self.url(path);
            let reply = self.get(&url, &FLAVOR)?;
            if reply.status != 200 {
                return Err(status(url, reply.status, "200"));
            }
            if !reply.flavor_google {
                return Err(NoticeError::NotGce { url });
            }
            let notice = parse(&reply.body, now_unix())
                .map_err(|source| NoticeError::Answer { url, source })?;
            if notice.is_some() {
                return Ok(notice);
            }
        }
        Ok(None)
    }

    fn ask_aws(&mut self) -> Result<Option<Notice>, NoticeError> {
        let url = self.url(AWS_INSTANCE_ACTION);
        let mut renewed = false;
        loop {
            let token = self.aws_token()?;
            let reply = self.get(&url, &[("X-aws-ec2-metadata-token", &token)])?;
            match reply.status {
                404 => return Ok(None),
                200 => {
                    return parse_aws_instance_action(&reply.body)
                        .map(Some)
                        .map_err(|source| NoticeError::Answer { url, source });
                }
                // The token expired or was not accepted: one new token, then give up.
                401 if !renewed => {
                    self.token = None;
                    renewed = true;
                }
                other => return Err(status(url, other, "200 or 404")),
            }
        }
    }

    /// The IMDSv2 token, asked with a `PUT` when there is none or it is about to expire.
    fn aws_token(&mut self) -> Result<String, NoticeError> {
        if let Some((token, renew_at)) = &self.token
            && Instant::now() < *renew_at
        {
            return Ok(token.clone());
        }
        let url = self.url(AWS_TOKEN);
        let ttl = AWS_TOKEN_TTL_S.to_string();
        let asked = Instant::now();
        let answer = self
            .agent
            .put(&url)
            .header("X-aws-ec2-metadata-token-ttl-seconds", &ttl)
            .send_empty();
        let reply = match answer.and_then(read_reply) {
            Ok(reply) => reply,
            Err(e) => {
                let failure = match transport(url.clone(), e) {
                    NoticeError::Timeout { timeout, .. } => {
                        format!("did not answer within {timeout:?}")
                    }
                    NoticeError::Unreachable { message, .. } => format!("failed: {message}"),
                    other => return Err(other),
                };
                return Err(NoticeError::AwsToken { url, failure });
            }
        };
        if reply.status != 200 {
            return Err(status(url, reply.status, "200 and a token"));
        }
        let token = reply.body.trim().to_owned();
        if token.is_empty() || token.contains(['\r', '\n']) {
            return Err(NoticeError::Answer {
                url,
                source: AnswerError::new("AWS api/token", &reply.body, "a token"),
            });
        }
        let lifetime = Duration::from_secs(AWS_TOKEN_TTL_S).saturating_sub(AWS_TOKEN_MARGIN);
        self.token = Some((token.clone(), asked + lifetime));
        Ok(token)
    }

    fn ask_azure(&mut self) -> Result<Option<Notice>, NoticeError> {
        let url = self.url(AZURE_EVENTS);
        let reply = self.get(&url, &[("Metadata", "true")])?;
        if reply.status != 200 {
            return Err(status(url, reply.status, "200"));
        }
        parse_azure_scheduled_events(&reply.body, now_unix())
            .map_err(|source| NoticeError::Answer { url, source })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn get(&self, url: &str, headers: &[(&str, &str)]) -> Result<Reply, NoticeError> {
        let mut request = self.agent.get(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
            .call()
            .and_then(read_reply)
            .map_err(|e| transport(url.to_owned(), e))
    }
}

/// Reads an answer's status, GCE's header and at most [`MAX_BODY_BYTES`] of its body.
fn read_reply(mut response: ureq::http::Response<ureq::Body>) -> Result<Reply, ureq::Error> {
    let status = response.status().as_u16();
    let flavor_google = response
        .headers()
        .get("metadata-flavor")
        .is_some_and(|v| v.as_bytes() == b"Google");
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_string()?;
    Ok(Reply {
        status,
        body,
        flavor_google,
    })
}

fn status(url: String, status: u16, expected: &'static str) -> NoticeError {
    NoticeError::Status {
        url,
        status,
        expected,
    }
}

/// A transport failure, in the watchdog's words.
fn transport(url: String, e: ureq::Error) -> NoticeError {
    match e {
        ureq::Error::Timeout(ureq::Timeout::Connect) => NoticeError::Timeout {
            url,
            timeout: CONNECT_TIMEOUT,
        },
        ureq::Error::Timeout(_) => NoticeError::Timeout {
            url,
            timeout: TOTAL_TIMEOUT,
        },
        ureq::Error::BodyExceedsLimit(_) => NoticeError::TooLong { url },
        ureq::Error::Io(io) => NoticeError::Unreachable {
            url,
            message: io.to_string(),
        },
        other => NoticeError::Unreachable {
            url,
            message: other.to_string(),
        },
    }
}

/// Now, in unix seconds.
pub(crate) fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
