//! The notice end to end over real HTTP on 127.0.0.1: a local server per provider answers as
//! the provider documents, "no notice" then a notice 30 s ahead; the poller says it within a
//! couple of intervals. Also: a server that never answers, AWS's token, and DMI fixtures
//! naming no provider (no connection at all).

mod server;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use watchdog_notice::{Mode, News, NoticePoller, NoticeSettings, Provider, TOTAL_TIMEOUT, detect};

const INTERVAL: Duration = Duration::from_millis(100);

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dmi")
        .join(name)
}

/// Looks at the news every 10 ms until `want` matches one, for at most `within`; returns it
/// and when it came. Every look must return at once.
fn wait_for(
    poller: &NoticePoller,
    within: Duration,
    want: impl Fn(&News) -> bool,
) -> Option<(News, Instant, Vec<News>)> {
    let start = Instant::now();
    let mut all = Vec::new();
    while start.elapsed() < within {
        let look = Instant::now();
        let news = poller.news();
        assert!(
            look.elapsed() < Duration::from_millis(50),
            "news() took {:?}",
            look.elapsed()
        );
        for n in news {
            if want(&n) {
                return Some((n, Instant::now(), all));
            }
            all.push(n);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// The flow every provider shares: quiet answers, then a notice 30 s ahead, said once,
/// within a couple of intervals, with the provider's deadline.
fn notice_flow(provider: Provider) -> server::Server {
    let server = server::serve(provider);
    let poller = NoticePoller::start(provider, &server.base_url(), INTERVAL);
    // A few quiet answers first: nothing to say, and no failure.
    std::thread::sleep(3 * INTERVAL);
    assert!(poller.asked() >= 2, "asked {} times", poller.asked());
    assert_eq!(poller.news(), vec![], "a quiet server is no news");

    let deadline = (now_unix() + 30.0).floor();
    server.announce(deadline);
    let flipped = Instant::now();
    let (news, at, before) = wait_for(&poller, Duration::from_secs(3), |n| {
        matches!(n, News::Notice { .. })
    })
    .unwrap_or_else(|| panic!("{provider}: no notice within 3 s"));
    let took = at - flipped;
    assert!(
        took <= 2 * INTERVAL + Duration::from_millis(200),
        "{provider}: the notice came {took:?} after the flip (interval {INTERVAL:?})"
    );
    assert_eq!(before, vec![], "{provider}: nothing else said");
    let News::Notice {
        provider: said_by,
        deadline_unix,
        detail,
    } = news
    else {
        unreachable!("matched above")
    };
    assert_eq!(said_by, provider);
    // AWS and Azure give the time (to the second); GCE's is "read + 30 s".
    let slack = if provider == Provider::Gce {
        1.5
    } else {
        0.001
    };
    assert!(
        (deadline_unix - deadline).abs() <= slack,
        "{provider}: deadline {deadline_unix} for {deadline} ({detail})"
    );
    assert!(deadline_unix > now_unix() + 25.0, "about 30 s ahead");

    // Read again and again: said once.
    std::thread::sleep(3 * INTERVAL);
    assert_eq!(poller.news(), vec![], "{provider}: a notice is said once");
    let dropped = Instant::now();
    drop(poller);
    assert!(
        dropped.elapsed() < Duration::from_millis(50),
        "drop does not join"
    );
    server
}

#[test]
fn gce_preempted_turns_true_and_the_notice_comes_with_thirty_seconds() {
    let server = notice_flow(Provider::Gce);
    assert_eq!(
        server.seen.refused.load(Ordering::SeqCst),
        0,
        "the flavor header is sent"
    );
}

#[test]
fn aws_instance_action_appears_and_its_time_is_the_deadline_through_an_imdsv2_token() {
    let server = notice_flow(Provider::Aws);
    // The token was asked once and sent with every GET (the server refuses a GET without it).
    assert_eq!(
        server.seen.tokens.load(Ordering::SeqCst),
        1,
        "one token, reused"
    );
    assert_eq!(
        server.seen.refused.load(Ordering::SeqCst),
        0,
        "every GET had the token"
    );
    // The server does refuse a GET without the token: the flow above needed it.
    let mut raw = TcpStream::connect(server.addr).expect("connect");
    raw.write_all(b"GET /latest/meta-data/spot/instance-action HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut answer = String::new();
    raw.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

#[test]
fn azure_preempt_event_appears_and_its_not_before_is_the_deadline() {
    let server = notice_flow(Provider::Azure);
    assert_eq!(
        server.seen.refused.load(Ordering::SeqCst),
        0,
        "Metadata: true is sent"
    );
}

#[test]
fn an_endpoint_that_never_answers_is_unanswered_within_the_timeout_and_blocks_no_one() {
    let (_listener, base) = server::silent();
    let started = Instant::now();
    let poller = NoticePoller::start(Provider::Gce, &base, INTERVAL);
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "start returns at once"
    );
    let (news, at, _) = wait_for(&poller, TOTAL_TIMEOUT + Duration::from_secs(2), |n| {
        matches!(n, News::Unanswered(_))
    })
    .expect("unanswered within the timeout");
    let took = at - started;
    assert!(
        took >= TOTAL_TIMEOUT - Duration::from_millis(100)
            && took < TOTAL_TIMEOUT + Duration::from_secs(1),
        "unanswered after {took:?}"
    );
    let News::Unanswered(why) = news else {
        unreachable!("matched above")
    };
    assert!(why.contains("did not answer within 2s"), "{why}");
    assert!(
        why.contains("/computeMetadata/v1/instance/preempted"),
        "{why}"
    );
    // Said once while it stays silent.
    let again = wait_for(&poller, TOTAL_TIMEOUT + Duration::from_millis(500), |n| {
        matches!(n, News::Unanswered(_))
    });
    assert!(again.is_none(), "said once");
    let dropped = Instant::now();
    drop(poller);
    assert!(
        dropped.elapsed() < Duration::from_millis(50),
        "drop does not wait for the question in flight"
    );
}

#[test]
fn aws_token_put_without_an_answer_names_the_hop_limit() {
    let (_listener, base) = server::silent();
    let poller = NoticePoller::start(Provider::Aws, &base, INTERVAL);
    let (news, _, _) = wait_for(&poller, TOTAL_TIMEOUT + Duration::from_secs(2), |n| {
        matches!(n, News::Unanswered(_))
    })
    .expect("unanswered within the timeout");
    let News::Unanswered(why) = news else {
        unreachable!("matched above")
    };
    assert!(why.contains("IMDSv2 token request (PUT "), "{why}");
    assert!(why.contains("hop limit"), "{why}");
    assert!(why.contains("--http-put-response-hop-limit 2"), "{why}");
}

#[test]
fn aws_token_put_refused_names_the_hop_limit_too() {
    // A port with no listener: the connection is refused at once.
    let (_, base) = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", l.local_addr().expect("addr"));
        (drop(l), base)
    };
    let poller = NoticePoller::start(Provider::Aws, &base, INTERVAL);
    let (news, _, _) = wait_for(&poller, Duration::from_secs(2), |n| {
        matches!(n, News::Unanswered(_))
    })
    .expect("unanswered");
    let News::Unanswered(why) = news else {
        unreachable!("matched above")
    };
    assert!(
        why.contains("failed: Connection refused") && why.contains("hop limit"),
        "{why}"
    );
}

#[test]
fn a_server_that_fails_then_answers_is_unanswered_once_then_answered() {
    let server = server::serve(Provider::Azure);
    server.seen.broken.store(true, Ordering::SeqCst);
    let poller = NoticePoller::start(Provider::Azure, &server.base_url(), INTERVAL);
    let (news, _, _) = wait_for(&poller, Duration::from_secs(2), |n| {
        matches!(n, News::Unanswered(_))
    })
    .expect("unanswered");
    let News::Unanswered(why) = news else {
        unreachable!("matched above")
    };
    assert!(why.contains("answered HTTP 503, expected 200"), "{why}");
    std::thread::sleep(3 * INTERVAL);
    assert_eq!(poller.news(), vec![], "said once");
    server.seen.broken.store(false, Ordering::SeqCst);
    let (_, _, before) = wait_for(&poller, Duration::from_secs(2), |n| *n == News::Answered)
        .expect("answered again");
    assert_eq!(before, vec![]);
}

#[test]
fn dmi_fixtures_name_each_provider_and_none() {
    assert_eq!(detect(&fixture("gce")), Some(Provider::Gce));
    assert_eq!(detect(&fixture("aws")), Some(Provider::Aws));
    assert_eq!(detect(&fixture("azure")), Some(Provider::Azure));
    assert_eq!(detect(&fixture("none")), None);
}

#[test]
fn auto_on_a_machine_of_no_provider_makes_no_connection() {
    let (connections, base) = server::counting();
    let auto = NoticeSettings {
        mode: Mode::Auto,
        endpoint: Some(base.clone()),
        interval: INTERVAL,
    };
    assert!(auto.start(&fixture("none")).is_none(), "no poller");
    let off = NoticeSettings {
        mode: Mode::Off,
        ..auto.clone()
    };
    assert!(off.start(&fixture("gce")).is_none(), "off asks no one");
    std::thread::sleep(3 * INTERVAL);
    assert_eq!(connections.load(Ordering::SeqCst), 0, "no connection made");

    // The counter does count: the same endpoint, a provider named, is contacted.
    let named = NoticeSettings {
        mode: Mode::Gce,
        ..auto.clone()
    };
    let poller = named.start(&fixture("none")).expect("a poller");
    assert_eq!(poller.provider(), Provider::Gce);
    let start = Instant::now();
    while connections.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        connections.load(Ordering::SeqCst) >= 1,
        "the control connects"
    );
    // And auto on a GCE machine starts a poller for GCE.
    let poller = auto.start(&fixture("gce")).expect("a poller");
    assert_eq!(poller.provider(), Provider::Gce);
}
