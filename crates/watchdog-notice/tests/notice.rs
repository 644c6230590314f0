//! The notice end to end over real HTTP on 127.0.0.1: a local server per provider answers as
//! the provider documents, "no notice" then a notice 30 s ahead; the poller says it once.
//! Also: a server that never answers, AWS's token, and DMI fixtures naming no provider (no
//! connection at all).
//!
//! No test here asserts how fast anything is (a busy CI machine may stall a thread for
//! seconds): what must come is waited for up to [`PATIENCE`], and "returns at once" is shown
//! by order, a call returning while a question is still in flight.

mod server;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use watchdog_notice::{Mode, News, NoticePoller, NoticeSettings, Provider, TOTAL_TIMEOUT, detect};

const INTERVAL: Duration = Duration::from_millis(100);
/// The longest wait for what must come: far beyond its usual time, short of a hung test.
const PATIENCE: Duration = Duration::from_secs(30);

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

/// Looks at the news every 10 ms until `want` matches one, for at most `within`; returns it,
/// when it came, and the news before it. (That a look returns at once is shown by
/// [`first_to_wait_for_the_question`].)
fn wait_for(
    poller: &NoticePoller,
    within: Duration,
    want: impl Fn(&News) -> bool,
) -> Option<(News, Instant, Vec<News>)> {
    let start = Instant::now();
    let mut all = Vec::new();
    while start.elapsed() < within {
        for n in poller.news() {
            if want(&n) {
                return Some((n, Instant::now(), all));
            }
            all.push(n);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Waits until `cond` holds, looking every millisecond, for at most `within`; whether it did.
fn until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() >= within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Waits until the poller has finished `more` questions after the ones finished now.
fn asks_again(poller: &NoticePoller, more: u64) {
    let done = poller.asked();
    assert!(
        until(PATIENCE, || poller.asked() >= done + more),
        "asked {} times in {PATIENCE:?}, {more} more wanted",
        poller.asked() - done
    );
}

/// Starts a poller of `server` (which holds every question unanswered), and once its first
/// question is in flight, looks at the news and drops the poller. Returns which of start,
/// `news()` and drop returned only after that question had ended (its client's timeout,
/// [`TOTAL_TIMEOUT`]), if one did: a call that waits for the server always does; one that
/// does not, only when this thread stalled as long as the timeout.
fn first_to_wait_for_the_question(server: &server::Holding) -> Option<&'static str> {
    let question = server.requests();
    let poller = NoticePoller::start(Provider::Gce, &server.base, INTERVAL);
    assert!(
        until(PATIENCE, || server.requests() > question),
        "no question within {PATIENCE:?}"
    );
    if !server.open(question) {
        return Some("start");
    }
    let news = poller.news();
    let asked = poller.asked();
    if !server.open(question) {
        return Some("news()");
    }
    assert_eq!(news, vec![], "nothing to say before an answer");
    assert_eq!(asked, 0, "the question in flight is not finished");
    drop(poller);
    if !server.open(question) {
        return Some("drop");
    }
    None
}

/// The flow every provider shares: quiet answers, then a notice 30 s ahead, said once, by
/// the first question after it, with the provider's deadline; the interval followed.
fn notice_flow(provider: Provider) -> server::Server {
    let server = server::serve(provider);
    // Beside the poller under test, one asking every hour, of a server of its own: it asks
    // once meanwhile (with an interval not followed, it would ask as often).
    let reference = server::serve(provider);
    let hourly = NoticePoller::start(provider, &reference.base_url(), Duration::from_secs(3600));
    let poller = NoticePoller::start(provider, &server.base_url(), INTERVAL);
    // A few quiet answers first: nothing to say, and no failure.
    asks_again(&poller, 2);
    assert_eq!(poller.news(), vec![], "a quiet server is no news");

    let announced = now_unix();
    let deadline = (announced + 30.0).floor();
    server.announce(deadline);
    // The question in flight may have read the server before the announcement; the next
    // one reads the notice.
    asks_again(&poller, 2);
    let seen = now_unix();
    let news = poller.news();
    let [
        News::Notice {
            provider: said_by,
            deadline_unix,
            detail,
        },
    ] = news.as_slice()
    else {
        panic!("{provider}: the notice and nothing else, two questions after it: {news:?}")
    };
    let (said_by, deadline_unix) = (*said_by, *deadline_unix);
    assert_eq!(said_by, provider);
    if provider == Provider::Gce {
        // GCE's is "read + 30 s", read after the announcement and before it was seen here.
        assert!(
            deadline_unix >= announced + 30.0 && deadline_unix <= seen + 30.0,
            "{provider}: deadline {deadline_unix}, announced at {announced}, seen at {seen} \
             ({detail})"
        );
    } else {
        // AWS and Azure give the time (to the second).
        assert!(
            (deadline_unix - deadline).abs() <= 0.001,
            "{provider}: deadline {deadline_unix} for {deadline} ({detail})"
        );
    }

    // Read again and again: said once.
    asks_again(&poller, 2);
    assert_eq!(poller.news(), vec![], "{provider}: a notice is said once");
    assert!(
        hourly.asked() <= 1,
        "{provider}: asking every hour, asked {} times while asking every {INTERVAL:?} asked {}",
        hourly.asked(),
        poller.asked()
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
    let server = server::holding();
    // Start, news() and drop return while a question is in flight: each would return only
    // after it ended if it waited for the server. A try fails without a blocking call only
    // if this thread stalled as long as the timeout; a few tries rule that out.
    let mut waited = Vec::new();
    while waited.len() < 5 {
        match first_to_wait_for_the_question(&server) {
            None => break,
            Some(call) => waited.push(call),
        }
    }
    assert!(
        waited.len() < 5,
        "returned only after the question in flight had ended ({TOTAL_TIMEOUT:?}), each try: \
         {waited:?}"
    );

    let started = Instant::now();
    let poller = NoticePoller::start(Provider::Gce, &server.base, INTERVAL);
    let (news, at, _) = wait_for(&poller, PATIENCE.saturating_sub(started.elapsed()), |n| {
        matches!(n, News::Unanswered(_))
    })
    .unwrap_or_else(|| panic!("not unanswered within {PATIENCE:?}"));
    let took = at - started;
    assert!(
        took >= TOTAL_TIMEOUT - Duration::from_millis(100) && took < PATIENCE,
        "unanswered after {took:?}, the timeout is {TOTAL_TIMEOUT:?}"
    );
    let News::Unanswered(why) = news else {
        unreachable!("matched above")
    };
    assert!(why.contains("did not answer within 2s"), "{why}");
    assert!(
        why.contains("/computeMetadata/v1/instance/preempted"),
        "{why}"
    );
    // Said once while it stays silent: the next question is unanswered too, and not said.
    asks_again(&poller, 1);
    assert_eq!(poller.news(), vec![], "said once");
}

#[test]
fn aws_token_put_without_an_answer_names_the_hop_limit() {
    let (_listener, base) = server::silent();
    let poller = NoticePoller::start(Provider::Aws, &base, INTERVAL);
    let (news, _, _) =
        wait_for(&poller, PATIENCE, |n| matches!(n, News::Unanswered(_))).expect("unanswered");
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
    let (news, _, _) =
        wait_for(&poller, PATIENCE, |n| matches!(n, News::Unanswered(_))).expect("unanswered");
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
    let (news, _, _) =
        wait_for(&poller, PATIENCE, |n| matches!(n, News::Unanswered(_))).expect("unanswered");
    let News::Unanswered(why) = news else {
        unreachable!("matched above")
    };
    assert!(why.contains("answered HTTP 503, expected 200"), "{why}");
    asks_again(&poller, 2);
    assert_eq!(poller.news(), vec![], "said once");
    server.seen.broken.store(false, Ordering::SeqCst);
    let (_, _, before) =
        wait_for(&poller, PATIENCE, |n| *n == News::Answered).expect("answered again");
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
    assert!(
        until(PATIENCE, || connections.load(Ordering::SeqCst) >= 1),
        "the control connects"
    );
    // And auto on a GCE machine starts a poller for GCE.
    let poller = auto.start(&fixture("gce")).expect("a poller");
    assert_eq!(poller.provider(), Provider::Gce);
}
