#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;

use super::*;

#[test]
fn wrap_splits_at_spaces() {
    assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
    assert!(wrap("", 10).is_empty());
}

#[test]
fn labels_that_would_overlap_go_to_new_rows() {
    let xs = Scale::new(0.0, 100.0, 0.0, 1000.0);
    let m = |t: f64, label: &str| Marker {
        class: "alert",
        t_s: t,
        color: COLOR_ALERT,
        label: label.to_string(),
        tooltip: String::new(),
        point_at: None,
    };
    let markers = [
        m(10.0, "alert (trend)"),
        m(11.0, "ack, checkpoint 0.66 s"),
        m(50.0, "exit: oom_kill"),
        m(99.0, "exit at the edge"),
    ];
    let (placed, rows) = place_labels(&markers, &xs, 1000.0);
    assert_eq!(rows, 2);
    assert_eq!(placed[0].row, 0);
    assert_eq!(placed[1].row, 1);
    assert_eq!(placed[2].row, 0);
    assert!(placed[3].anchor_end);
}

#[test]
fn title_falls_back() {
    let mut rec = Recording::default();
    assert_eq!(title(&rec), "watchdog recording");
    rec.verdict = Some("oom_kill".into());
    assert!(title(&rec).contains("OOM killer"));
    rec.verdict_summary = Some("killed by the OOM killer at 36.3 s".into());
    assert_eq!(title(&rec), "killed by the OOM killer at 36.3 s");
}

const FIXTURE: &str = include_str!("../../tests/fixtures/cgroup_oom.rec");

fn fixture() -> Recording {
    crate::recording::parse(FIXTURE).unwrap()
}

/// The SVG text of the panel for `resource`, up to the next panel.
fn panel_of<'a>(svg: &'a str, resource: &str) -> &'a str {
    let start = svg
        .find(&format!("<g class=\"panel\" data-resource=\"{resource}\""))
        .unwrap_or_else(|| panic!("no panel for {resource}"));
    let rest = &svg[start + 1..];
    let end = rest.find("<g class=\"panel\"").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn fixture_has_every_element() {
    let svg = render_svg(&fixture());
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.contains("id=\"watchdog-report\""));
    assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains("class=\"verdict\""));
    assert!(svg.contains("Killed by the kernel&apos;s OOM killer at 27.6 s"));
    let cg = panel_of(&svg, "cgroup_memory");
    for class in [
        "usage",
        "usage-area",
        "limit",
        "alert",
        "alert-marker",
        "projection",
        "exhaustion",
        "ack",
        "exit",
        "alert-label",
        "ack-label",
        "exit-label",
        "exhaustion-label",
    ] {
        assert!(
            cg.contains(&format!("class=\"{class}\"")),
            "no {class} in the cgroup panel"
        );
    }
    assert!(cg.contains("predicted exhaustion at 29.1 s"));
    assert!(cg.contains("alert (trend)"));
    assert!(cg.contains("ack, checkpoint 0.9 s"));
    assert!(cg.contains("exit: oom_kill"));
    assert!(cg.contains("512 MiB"), "binary units on the axis");
    assert!(cg.contains("stroke-dasharray=\"7 4\""), "dashed limit");
    // The alert belongs to cgroup_memory only; ack and exit are shown everywhere.
    let host = panel_of(&svg, "host_memory");
    assert!(!host.contains("class=\"alert\""));
    assert!(host.contains("class=\"ack\"") && host.contains("class=\"exit\""));
    assert!(host.contains("16 GiB"));
    assert!(svg.contains("data-resource=\"disk:/scratch\""));
    // Evidence and facts in the header.
    assert!(svg.contains("memory.events oom_kill rose from 0 to 1"));
    assert!(svg.contains("pid 41327"));
}

#[test]
fn html_is_self_contained() {
    let html = render_html(&fixture());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(
        "<title>Killed by the kernel's OOM killer at 27.6 s: the memory cgroup reached its 512 MiB limit.</title>"
    ));
    assert!(html.contains("<svg"));
    assert!(html.contains("<table class=\"events\">"));
    assert!(html.contains("<ul class=\"evidence\">"));
    let lower = html.to_ascii_lowercase();
    assert!(!lower.contains("<script"), "no scripts");
    for fetch in [" src=", " href=", "@import", "url(http", "<link"] {
        assert!(!lower.contains(fetch), "no fetches: found {fetch}");
    }
    // The only URL is the SVG namespace, which is a name, not a fetch.
    assert_eq!(lower.matches("http").count(), 1);
}

#[test]
fn without_verdict_the_title_says_recording() {
    let rec = crate::recording::parse("time,used,limit\n0,1,10\n1,2,10\n").unwrap();
    let html = render_html(&rec);
    assert!(html.contains("<title>watchdog recording</title>"));
    assert!(render_svg(&rec).contains("no exit recorded"));
}

#[test]
fn names_are_escaped() {
    let rec = crate::recording::parse(
        "# watchdog recording v1\n#{\"t\":1,\"event\":\"exit\",\"verdict\":\"unknown\",\"summary\":\"<b>odd</b> & \\\"quoted\\\"\"}\ntime,resource,used,limit\n0,a<b>&c,1,10\n",
    )
    .unwrap();
    let svg = render_svg(&rec);
    assert!(!svg.contains("<b>"));
    assert!(svg.contains("a&lt;b&gt;&amp;c"));
    let html = render_html(&rec);
    assert!(html.contains("<title>&lt;b&gt;odd&lt;/b&gt; &amp; &quot;quoted&quot;</title>"));
}

#[test]
fn unlimited_resource_has_no_limit_line() {
    let rec = crate::recording::parse(
        "time,used,limit,resource\n0,1,18446744073709551615,tree_memory\n1,5,18446744073709551615,tree_memory\n",
    )
    .unwrap();
    let svg = render_svg(&rec);
    let p = panel_of(&svg, "tree_memory");
    assert!(p.contains("class=\"usage\""));
    assert!(!p.contains("class=\"limit\""));
    assert!(p.contains("no limit"));
}

#[test]
fn runtime_is_shown_in_minutes() {
    let rec = crate::recording::parse(
        "# resource: runtime\ntime,used,limit\n0,300000,900000\n60,360000,900000\n",
    )
    .unwrap();
    let svg = render_svg(&rec);
    assert!(svg.contains("15 min"), "the limit on the axis");
    assert!(svg.contains("data-unit=\"millis\""));
}

#[test]
fn exhaustion_beyond_the_axis_points_right() {
    let text = "# watchdog recording v1\n#{\"t\":5,\"event\":\"alert\",\"resource\":\"m\",\"used\":50,\"limit\":100,\"predicted_s\":1000}\ntime,resource,used,limit\n0,m,40,100\n10,m,60,100\n";
    let svg = render_svg(&crate::recording::parse(text).unwrap());
    assert!(svg.contains("predicted exhaustion at 16m45s →"), "{svg}");
}

/// Issue 19: the CUDA out-of-memory error the run reported is marked, with its step, on
/// its GPU's panel only.
#[test]
fn a_reported_cuda_oom_is_marked_on_its_gpu_panel() {
    let text = "# watchdog recording v1\n#{\"resource\":{\"name\":\"gpu0\",\"kind\":\"gpu_memory\",\"unit\":\"bytes\"}}\n#{\"resource\":{\"name\":\"gpu1\",\"kind\":\"gpu_memory\",\"unit\":\"bytes\"}}\n#{\"resource\":{\"name\":\"host_memory\",\"kind\":\"host_memory\",\"unit\":\"bytes\"}}\n#{\"t\":8,\"event\":\"cuda_oom\",\"resource\":\"gpu0\",\"step\":121,\"peak\":3221225472,\"available\":3000000000}\n#{\"t\":9,\"event\":\"exit\",\"verdict\":\"gpu_oom\",\"summary\":\"CUDA out of memory at step 121\"}\ntime,resource,used,limit\n0,gpu0,1,8589934592\n0,gpu1,1,8589934592\n0,host_memory,1,8589934592\n10,gpu0,2,8589934592\n10,gpu1,2,8589934592\n10,host_memory,2,8589934592\n";
    let svg = render_svg(&crate::recording::parse(text).unwrap());
    let gpu0 = panel_of(&svg, "gpu0");
    assert!(gpu0.contains("class=\"cuda-oom\""), "{gpu0}");
    assert!(gpu0.contains("CUDA OOM at step 121"), "{gpu0}");
    assert!(gpu0.contains("peak 3.00 GiB"), "{gpu0}");
    for other in ["gpu1", "host_memory"] {
        assert!(!panel_of(&svg, other).contains("CUDA OOM"), "{other}");
    }
}

#[test]
fn empty_recording_renders() {
    let rec =
        crate::recording::parse("# watchdog recording v1\n#{\"meta\":{\"pid\":3}}\n").unwrap();
    assert!(render_svg(&rec).contains("no resources in this recording"));
    let rec = crate::recording::parse(
        "# watchdog recording v1\n#{\"resource\":{\"name\":\"m\",\"unit\":\"bytes\"}}\n",
    )
    .unwrap();
    assert!(render_svg(&rec).contains("no samples in this recording"));
}

/// A 10-minute recording at 100 Hz, every row different, two resources: 120,000 rows.
#[test]
fn long_recording_renders_fast_and_small() {
    let mut text = String::from(
        "# watchdog recording v1\n#{\"resource\":{\"name\":\"cgroup_memory\",\"unit\":\"bytes\"}}\n#{\"resource\":{\"name\":\"host_memory\",\"unit\":\"bytes\"}}\ntime,resource,used,limit\n",
    );
    for i in 0..60_000u64 {
        let t = i as f64 / 100.0;
        let noise = (i * 7919) % 4099;
        let _ = writeln!(
            text,
            "{t:.3},cgroup_memory,{},1073741824",
            100_000_000 + i * 10_000 + noise * 1000
        );
        let _ = writeln!(
            text,
            "{t:.3},host_memory,{},17179869184",
            4_000_000_000 + noise * 4096
        );
    }
    let started = std::time::Instant::now();
    let rec = crate::recording::parse(&text).unwrap();
    let svg = render_svg(&rec);
    let took = started.elapsed();
    assert_eq!(rec.series[0].len(), 60_000);
    // Bounded by the plot's width (~1,000 px, a few commands per column), not the rows.
    assert!(svg.len() < 200_000, "{} bytes", svg.len());
    // Generous for a debug build on a busy 2-core machine.
    assert!(took.as_secs_f64() < 5.0, "{took:?}");
}

/// docs/report-example.svg (shown in the README) is this fixture's rendering: it
/// must not drift from what the code draws.
#[test]
fn docs_example_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/report-example.svg");
    let committed = std::fs::read_to_string(path).unwrap();
    assert!(
        committed == render_svg(&fixture()),
        "docs/report-example.svg is stale: regenerate it with\n  cargo run -p watchdog-report --example report -- crates/watchdog-report/tests/fixtures/cgroup_oom.rec docs/report-example.svg\nand docs/report-example.png with chromium --headless --screenshot (see crates/watchdog-report/README.md)"
    );
}
