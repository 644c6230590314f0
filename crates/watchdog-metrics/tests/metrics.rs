//! The metrics endpoint for real: HTTP over TCP, Prometheus's own `promtool` on the
//! exposition and on the example alerting rules, and a real Prometheus server scraping it.
//!
//! `promtool` and `prometheus` come from Debian's `prometheus` package; without it these
//! tests fail under CI=true and are skipped loudly otherwise (watchdog-testsupport).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use watchdog_metrics::exposition::{self, CONTENT_TYPE};
use watchdog_metrics::server::{HEAD_TIMEOUT, MAX_WAITING, MetricsHandle, MetricsServer};
use watchdog_testsupport::prometheus::{Prometheus, exchange, get, tool};
use watchdog_testsupport::scratch;
use watchdog_types::ResourceKind;
use watchdog_types::status::{ResourceStatus, TargetStatus, WatchStatus};

/// A daemon watching two runs of two users, with every kind of resource and unit, a
/// resource name holding a quote, a backslash and a newline, and absent limits and predictions.
fn rich_status() -> WatchStatus {
    let r = ResourceStatus::reading;
    let mut mem = r(
        "cgroup_memory",
        ResourceKind::CgroupMemory,
        3 << 30,
        Some(4 << 30),
    );
    mem.trend_per_s = 1_048_576.0;
    mem.seconds_left = Some(1024.0);
    mem.alerts = 2;
    let mut disk = r(
        "disk:/data/o\"dd\\dir\nx",
        ResourceKind::DiskBytes,
        500_000_000,
        Some(1_000_000_000),
    );
    disk.trend_per_s = -20.5;
    let mut inodes = r("inodes:/data", ResourceKind::DiskInodes, 1200, Some(65536));
    inodes.trend_per_s = 3.0;
    inodes.seconds_left = Some(21_444.5);
    let mut runtime = r(
        "runtime",
        ResourceKind::Runtime,
        7_200_500,
        Some(86_400_000),
    );
    runtime.trend_per_s = 1000.0;
    runtime.seconds_left = Some(79_199.5);
    let alice = TargetStatus {
        pid: 4242,
        uid: 1001,
        user: "alice".to_string(),
        command: "python3 train.py --lr 0.1".to_string(),
        rule: Some("gpu-jobs".to_string()),
        slurm_job_id: Some(812),
        slurm_step: Some("batch".to_string()),
        since_unix: 1_763_000_000.25,
        lead_s: 90.0,
        request_file: "/run/watchdog/4242.json".to_string(),
        alerts_sent: 3,
        checkpoints_acknowledged: 2,
        checkpoint_seconds_total: 41.5,
        samples_dropped: 7,
        resources: vec![
            mem,
            r("cgroup_cache", ResourceKind::CgroupCache, 123_456_789, None),
            disk,
            inodes,
            runtime,
            r("gpu0", ResourceKind::GpuMemory, 20 << 30, Some(80 << 30)),
        ],
    };
    let bob = TargetStatus {
        pid: 977,
        uid: 1002,
        user: "bob".to_string(),
        command: "torchrun --nproc 2 fit.py".to_string(),
        rule: None,
        slurm_job_id: None,
        slurm_step: None,
        since_unix: 1_763_000_500.0,
        lead_s: 60.0,
        request_file: "/tmp/wd-977.json".to_string(),
        resources: vec![
            r(
                "host_memory",
                ResourceKind::HostMemory,
                8 << 30,
                Some(16 << 30),
            ),
            r("swap", ResourceKind::Swap, 0, Some(2 << 30)),
            r("tree_memory", ResourceKind::TreeMemory, 6 << 30, None),
        ],
        ..TargetStatus::default()
    };
    WatchStatus {
        watchdog_pid: 100,
        mode: "daemon".to_string(),
        time_unix: 1_763_001_000.0,
        interval_s: 0.05,
        targets: vec![alice, bob],
    }
}

fn serve(status: WatchStatus) -> MetricsHandle {
    let server = MetricsServer::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    server.serve(Arc::new(move || status.clone()))
}

#[test]
fn serves_the_rendered_snapshot_at_metrics() {
    let status = rich_status();
    let handle = serve(status.clone());
    let reply = get(handle.local_addr(), "/metrics");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.headers["content-type"], CONTENT_TYPE);
    assert_eq!(reply.headers["connection"], "close");
    assert_eq!(
        reply.headers["content-length"],
        reply.body.len().to_string()
    );
    assert_eq!(reply.body, exposition::render(&status));
}

#[test]
fn index_links_metrics_other_paths_404_other_methods_405() {
    let handle = serve(rich_status());
    let addr = handle.local_addr();
    let index = get(addr, "/");
    assert_eq!(index.status, 200);
    assert!(index.headers["content-type"].starts_with("text/html"));
    assert!(
        index.body.contains("<a href=\"/metrics\">"),
        "{}",
        index.body
    );
    assert_eq!(get(addr, "/metrics/").status, 404);
    assert_eq!(get(addr, "/favicon.ico").status, 404);
    let post = exchange(
        addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(post.status, 405);
    assert_eq!(post.headers["allow"], "GET, HEAD");
    let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty(), "HEAD got a body: {:?}", head.body);
    assert_ne!(head.headers["content-length"], "0");
    assert_eq!(exchange(addr, b"nonsense\r\n\r\n").status, 400);
}

#[test]
fn a_request_head_over_8_kib_gets_431() {
    let handle = serve(rich_status());
    let mut request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
    while request.len() <= 9 * 1024 {
        request
            .extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    request.extend_from_slice(b"\r\n");
    assert_eq!(exchange(handle.local_addr(), &request).status, 431);
}

#[test]
fn a_silent_client_neither_blocks_others_nor_stays_open() {
    let handle = serve(rich_status());
    let addr = handle.local_addr();
    let mut silent = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
    // Half a request line, then nothing.
    silent
        .write_all(b"GET /metr")
        .unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    assert_eq!(get(addr, "/metrics").status, 200);
    assert!(
        started.elapsed() < HEAD_TIMEOUT,
        "a scrape waited {:?} behind a silent client",
        started.elapsed()
    );
    silent
        .set_read_timeout(Some(HEAD_TIMEOUT + Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut rest = Vec::new();
    let closed = silent.read_to_end(&mut rest);
    assert!(
        closed.is_ok(),
        "the server kept a silent client open past {HEAD_TIMEOUT:?}: {closed:?}"
    );
    assert!(rest.is_empty(), "answered an incomplete request: {rest:?}");
}

/// 20 idle connections made every scrape answer 503 (each held one of 8 threads for
/// 5 s). Now idle connections hold no thread: with 300 of them open, a scrape answers
/// 200 at once, and the endpoint keeps at most MAX_WAITING of them open.
#[test]
fn hundreds_of_idle_clients_do_not_keep_a_scrape_out() {
    watchdog_testsupport::raise_fd_limit(4096);
    let handle = serve(rich_status());
    let addr = handle.local_addr();
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    for _ in 0..3 {
        assert_eq!(get(addr, "/metrics").status, 200);
    }
    assert!(
        started.elapsed() < HEAD_TIMEOUT,
        "three scrapes took {:?} behind idle clients",
        started.elapsed()
    );
    let mut closed = 0;
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 1];
        let open = matches!(
            s.read(&mut buf),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        );
        closed += usize::from(!open);
    }
    assert!(
        closed >= 300 - MAX_WAITING - 3,
        "only {closed} of 300 idle connections were closed to make room"
    );
}

#[test]
fn a_port_in_use_is_a_clear_one_line_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = taken.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let err = MetricsServer::bind(&port.to_string())
        .err()
        .unwrap_or_else(|| panic!("bound port {port} twice"));
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("already in use"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn a_bad_address_is_a_one_line_error_naming_it() {
    let err = MetricsServer::bind("localhost:http")
        .err()
        .unwrap_or_else(|| panic!("accepted localhost:http"));
    assert!(
        err.starts_with("invalid metrics address \"localhost:http\": "),
        "{err}"
    );
    assert!(
        err.contains("expected PORT, HOST:PORT or [IPv6]:PORT"),
        "{err}"
    );
}

#[test]
fn stopping_the_handle_closes_the_port() {
    let handle = serve(WatchStatus::default());
    let addr = handle.local_addr();
    assert_eq!(get(addr, "/metrics").status, 200);
    handle.stop();
    let again = TcpStream::connect_timeout(&addr, Duration::from_secs(5));
    assert!(again.is_err(), "still accepting on {addr} after stop");
    // And the port is free for the next watchdog.
    let rebound = MetricsServer::bind(&addr.to_string());
    assert!(rebound.is_ok(), "{:?}", rebound.err());
}

#[test]
fn the_snapshot_is_taken_at_each_scrape() {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let server = MetricsServer::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let handle = server.serve(Arc::new(move || {
        let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        WatchStatus {
            interval_s: n as f64,
            ..WatchStatus::default()
        }
    }));
    let addr = handle.local_addr();
    assert!(
        get(addr, "/metrics")
            .body
            .contains("watchdog_sampling_interval_seconds 0\n")
    );
    assert!(
        get(addr, "/metrics")
            .body
            .contains("watchdog_sampling_interval_seconds 1\n")
    );
    // The index page does not take a snapshot.
    get(addr, "/");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
}

// ---- Prometheus's own tools ----

fn alert_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/watchdog-alerts.yml")
}

/// Runs `promtool ARGS` with `stdin`; panics with its output unless it succeeds.
fn promtool(promtool: &Path, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(promtool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin.as_bytes())
            .unwrap_or_else(|e| panic!("cannot feed promtool: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("promtool: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}):\n{text}",
        out.status
    );
    text
}

#[test]
fn promtool_finds_no_problem_in_the_exposition() {
    let Some(bin) = tool("promtool") else { return };
    for status in [rich_status(), WatchStatus::default()] {
        let text = exposition::render(&status);
        let out = promtool(&bin, &["check", "metrics"], &text);
        // promtool prints lint problems (and exits 1); nothing printed means none.
        assert!(
            out.trim().is_empty(),
            "promtool complained:\n{out}\n---\n{text}"
        );
    }
}

#[test]
fn promtool_accepts_the_example_alerting_rules() {
    let Some(bin) = tool("promtool") else { return };
    let rules = alert_rules();
    let out = promtool(&bin, &["check", "rules", &rules.to_string_lossy()], "");
    assert!(out.contains("SUCCESS: 4 rules found"), "{out}");
}

/// The example rules fire when they should and stay quiet otherwise (`promtool test rules`).
#[test]
fn the_example_alerting_rules_fire_as_documented() {
    let Some(bin) = tool("promtool") else { return };
    let dir = scratch();
    let rules = alert_rules()
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let l = r#"instance="ws1:9187",job="watchdog",pid="42",user="alice",rule="""#;
    let lb = r#"instance="ws1:9187",job="watchdog",pid="43",user="bob",rule="""#;
    // The same labels as a YAML map for `exp_labels`; Prometheus drops the empty `rule`.
    let y = r#"instance: "ws1:9187", job: watchdog, pid: "42", user: alice"#;
    let test = format!(
        r#"rule_files: ["{rules}"]
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'watchdog_resource_exhaustion_seconds{{{l},resource="cgroup_memory",kind="cgroup_memory"}}'
        values: '600 400 200 100 50 20'
      - series: 'watchdog_resource_exhaustion_seconds{{{lb},resource="swap",kind="swap"}}'
        values: '900 900 900 900 900 900'
    alert_rule_test:
      - eval_time: 15s
        alertname: WatchdogResourceExhaustionSoon
        exp_alerts: []
      - eval_time: 75s
        alertname: WatchdogResourceExhaustionSoon
        exp_alerts:
          - exp_labels: {{ {y}, resource: cgroup_memory, kind: cgroup_memory, severity: warning }}
            exp_annotations:
              summary: "Run 42 of alice will exhaust cgroup_memory in 20s"
              description: "The watchdog on ws1:9187 predicts that cgroup_memory (cgroup_memory) of process 42 (user alice, rule '') reaches its limit in under 5 minutes."
  - interval: 1m
    input_series:
      - series: 'watchdog_samples_dropped_total{{{l}}}'
        values: '0 0 0 5 5'
      - series: 'watchdog_samples_dropped_total{{{lb}}}'
        values: '0 0 0 0 0'
    alert_rule_test:
      - eval_time: 2m
        alertname: WatchdogSamplesDropped
        exp_alerts: []
      - eval_time: 4m
        alertname: WatchdogSamplesDropped
        exp_alerts:
          - exp_labels: {{ {y}, severity: warning }}
            exp_annotations:
              summary: "The watchdog dropped samples of run 42 of alice"
              description: "5 samples dropped in the last 5 minutes on ws1:9187: the watchdog cannot keep up with its sampling interval."
  - interval: 1m
    input_series:
      # alice was asked at minute 1 and never acknowledged; bob acknowledged at minute 2.
      - series: 'watchdog_alerts_total{{{l}}}'
        values: '0 1x20'
      - series: 'watchdog_checkpoints_acknowledged_total{{{l}}}'
        values: '0x21'
      - series: 'watchdog_alerts_total{{{lb}}}'
        values: '0 1x20'
      - series: 'watchdog_checkpoints_acknowledged_total{{{lb}}}'
        values: '0 0 1x19'
    alert_rule_test:
      - eval_time: 5m
        alertname: WatchdogCheckpointNotAcknowledged
        exp_alerts: []
      - eval_time: 12m
        alertname: WatchdogCheckpointNotAcknowledged
        exp_alerts:
          - exp_labels: {{ {y}, severity: critical }}
            exp_annotations:
              summary: "Run 42 of alice was asked to checkpoint and has not acknowledged for 10 minutes"
              description: "The watchdog on ws1:9187 sent checkpoint requests to process 42 (rule '') and no checkpoint was acknowledged since."
  - interval: 1m
    input_series:
      - series: 'up{{instance="ws1:9187",job="watchdog"}}'
        values: '1 0 0 0 0'
    alert_rule_test:
      - eval_time: 1m
        alertname: WatchdogDown
        exp_alerts: []
      - eval_time: 4m
        alertname: WatchdogDown
        exp_alerts:
          - exp_labels: {{ instance: "ws1:9187", job: watchdog, severity: warning }}
            exp_annotations:
              summary: "The watchdog on ws1:9187 cannot be scraped"
"#,
        rules = rules.display()
    );
    let path = dir.path().join("watchdog-alerts.test.yml");
    std::fs::write(&path, test).unwrap_or_else(|e| panic!("{e}"));
    let out = promtool(&bin, &["test", "rules", &path.to_string_lossy()], "");
    assert!(out.contains("SUCCESS"), "{out}");
}

// ---- A real Prometheus server ----

/// A Prometheus server, killed and reaped when dropped (also when the test panics).
/// Each `watchdog_resource_used_bytes` series as (pid, user, rule, resource, kind) → value.
type Series = BTreeMap<(String, String, String, String, String), f64>;

fn expected_used_bytes(status: &WatchStatus) -> Series {
    let mut want = Series::new();
    for t in &status.targets {
        for r in &t.resources {
            if r.unit == watchdog_types::Unit::Bytes {
                want.insert(
                    (
                        t.pid.to_string(),
                        t.user.clone(),
                        t.rule.clone().unwrap_or_default(),
                        r.name.clone(),
                        r.kind.as_str().to_string(),
                    ),
                    r.used as f64,
                );
            }
        }
    }
    want
}

/// The series of a Prometheus instant-query JSON answer, in the shape of [`expected_used_bytes`].
fn parse_query_answer(body: &str) -> Option<Series> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    let label = |m: &serde_json::Value, k: &str| m.get(k)?.as_str().map(str::to_string);
    let mut got = Series::new();
    for item in json.pointer("/data/result")?.as_array()? {
        let m = item.get("metric")?;
        let value: f64 = item.pointer("/value/1")?.as_str()?.parse().ok()?;
        // Prometheus drops labels with empty values.
        let key = (
            label(m, "pid")?,
            label(m, "user")?,
            label(m, "rule").unwrap_or_default(),
            label(m, "resource")?,
            label(m, "kind")?,
        );
        got.insert(key, value);
    }
    Some(got)
}

#[test]
fn a_real_prometheus_scrapes_the_values_of_the_snapshot() {
    let Some(bin) = tool("prometheus") else {
        return;
    };
    let status = rich_status();
    let want = expected_used_bytes(&status);
    assert!(want.len() >= 7, "the fixture lost its byte resources");
    let handle = serve(status);
    let dir = scratch();
    let rules = alert_rules()
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut prometheus = Prometheus::start(&bin, dir.path(), handle.local_addr(), &[rules]);
    prometheus.wait_for_query("watchdog_resource_used_bytes", |body| {
        parse_query_answer(body).as_ref() == Some(&want)
    });
    // The scrape itself was healthy (no sample rejected), and the rules loaded.
    let up = prometheus
        .get("/api/v1/query?query=scrape_samples_scraped")
        .unwrap_or_else(|| panic!("prometheus stopped listening"));
    assert!(up.body.contains("\"job\":\"watchdog\""), "{}", up.body);
    let rules = prometheus
        .get("/api/v1/rules")
        .unwrap_or_else(|| panic!("prometheus stopped listening"));
    assert!(
        rules.body.contains("WatchdogCheckpointNotAcknowledged"),
        "{}",
        rules.body
    );
    drop(prometheus);
}
