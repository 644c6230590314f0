//! `watchdog report A B`: two real runs of the same leaking script under different
//! `--mem-limit`s, compared on one page and checked in headless Chromium.

use crate::support::*;

/// Runs hog.py leaking to 160 MiB under `--mem-limit LIMIT`, recorded to `rec`, with
/// the Python client seeing `transformers` at version `transformers` (a distribution's
/// metadata put first on its path: the client reads versions, it imports nothing).
fn recorded_leak(scene: &Scene, limit: &str, rec: &std::path::Path, transformers: &str) {
    let site = scene.dir.path().join("site");
    let dist = site.join(format!("transformers-{transformers}.dist-info"));
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(
        dist.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: transformers\nVersion: {transformers}\n"),
    )
    .unwrap();
    let out = scene
        .watchdog()
        .args(["--mem-limit", limit, "--record", rec.to_str().unwrap()])
        .args(["run", "--", "python3"])
        .arg(hog())
        .arg(&scene.rep)
        .args([
            "leak",
            "--step-mib",
            "8",
            "--every",
            "0.05",
            "--max-mib",
            "160",
            "--seconds",
            "2",
        ])
        .env("PYTHONPATH", &site)
        .output()
        .expect("run watchdog");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(rec.exists(), "no recording at {}", rec.display());
}

#[test]
fn report_of_two_recordings_compares_them_in_a_browser() {
    let (scene_a, scene_b) = (Scene::new(), Scene::new());
    let a = scene_a.dir.path().join("roomy.rec");
    let b = scene_b.dir.path().join("tight.rec");
    recorded_leak(&scene_a, "1GiB", &a, "4.0.1");
    recorded_leak(&scene_b, "100MiB", &b, "5.0.2");

    let dir = scratch();
    let html = dir.path().join("compare.html");
    let svg = dir.path().join("compare.svg");
    for out in [&html, &svg] {
        let made = run(&[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(
            made.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.starts_with("<svg"), "{svg_text}");
    assert!(
        svg_text.contains("limit tree_memory: run A 1.00 GiB, run B 100.00 MiB"),
        "{svg_text}"
    );

    // Three recordings are a usage error, not a comparison of the first two.
    let three = run(&[
        "report",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        a.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(three.status.code(), Some(2));

    let Some(dom) = chromium_dom(&html) else {
        return;
    };
    // Both runs, named by their files.
    assert!(
        dom.contains("roomy.rec") && dom.contains("tight.rec"),
        "{dom}"
    );
    for run in ["a", "b"] {
        assert!(
            dom.contains(&format!("<tr data-run=\"{run}\">")),
            "no verdict of run {run}"
        );
        assert!(
            dom.contains(&format!("<g class=\"run\" data-run=\"{run}\">")),
            "no curve of run {run}"
        );
    }
    // The difference table names the changed limit, with both values; the same
    // settings are folded away, not listed as differences.
    let table = crate::compare::differences_table(&dom);
    assert!(
        table.contains("data-field=\"limit tree_memory\""),
        "{table}"
    );
    assert!(
        table.contains("1.00 GiB") && table.contains("100.00 MiB"),
        "{table}"
    );
    assert!(!table.contains("data-field=\"command\""), "{table}");
    // ... and the framework version that changed between the runs.
    assert!(
        table.contains("transformers") && table.contains("4.0.1") && table.contains("5.0.2"),
        "{table}"
    );
    assert!(dom.contains("<details class=\"same\">"), "{dom}");
    // tree_memory comes first (run B went over its limit), with both runs' dashed limits
    // and run B's alert.
    let panels = dom.split("<g class=\"panel\"").skip(1).collect::<Vec<_>>();
    assert!(
        panels
            .first()
            .is_some_and(|p| p.contains("data-resource=\"tree_memory\"")),
        "{dom}"
    );
    let tree = panels[0];
    assert_eq!(tree.matches("class=\"limit\"").count(), 2, "{tree}");
    assert!(tree.contains("class=\"alert\""), "{tree}");
    assert!(tree.contains("reached its limit"), "{tree}");
}
