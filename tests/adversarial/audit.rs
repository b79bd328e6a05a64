//! `kadmit audit` on a cluster-sized input: objects are read and judged one
//! at a time, so memory does not grow with the input.

use std::io::Write as _;

use serde_json::Value;

use super::support::{measured, mib};
use crate::server::harness::{bundled_rules, fixture};

#[test]
fn audit_judges_a_large_list_in_flat_memory() {
    // 2,000 Pods with a 20 KB annotation each: a 40 MB `kubectl get -o json`
    // List. Parsed whole, its text and its values would take 80 MB on top
    // of the ~30 MB kadmit needs; streamed, one Pod at a time.
    let review: Value = serde_json::from_slice(&fixture("create-pod.json")).expect("fixture");
    let mut pod = review["request"]["object"].clone();
    pod["metadata"]["annotations"]["padding"] = Value::String("x".repeat(20_000));
    let input = tempfile::NamedTempFile::new().expect("temp file");
    let mut writer = std::io::BufWriter::new(input.as_file());
    write!(
        writer,
        "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":["
    )
    .expect("write");
    for i in 0..2_000 {
        pod["metadata"]["name"] = Value::String(format!("pod-{i}"));
        if i > 0 {
            write!(writer, ",").expect("write");
        }
        serde_json::to_writer(&mut writer, &pod).expect("write");
    }
    write!(writer, "],\"metadata\":{{}}}}").expect("write");
    writer.flush().expect("flush");
    drop(writer);
    let bytes = input.as_file().metadata().expect("size").len();
    assert!(bytes > 40_000_000, "{bytes} bytes");

    let rules = bundled_rules();
    let audited = measured(
        &[
            "audit".as_ref(),
            rules.as_os_str(),
            "-".as_ref(),
            "--output".as_ref(),
            "json".as_ref(),
        ],
        Some(input.path()),
        // A debug build judges a few hundred such Pods a second.
        std::time::Duration::from_secs(120),
    );
    assert_eq!(audited.code, Some(0), "{}", audited.stderr);
    let summary: Value = audited
        .stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .expect("a summary line");
    assert_eq!(summary["summary"]["objects"], 2_000, "{summary}");
    // Every pod is changed by the defaulting rules: one line each, then the
    // summary.
    assert_eq!(audited.stdout.lines().count(), 2_001);
    let peak = audited.peak_rss_kib * 1024;
    assert!(
        peak < 64 << 20,
        "kadmit audit peaked at {:.0} MiB on a {:.0} MiB input",
        mib(peak),
        mib(bytes)
    );
}

/// One JSON object whose text is within the 16 MiB bound but would take
/// about 1.4 GB parsed (`[{"a":0},…]`: every one-key map a 640-byte tree
/// node) is refused before it is parsed, as the webhook refuses such a
/// review; alone, as a List item, and spread over many top-level keys.
#[test]
fn audit_refuses_objects_that_would_take_too_much_memory_parsed() {
    let maps = format!("[{}{{\"a\":0}}]", "{\"a\":0},".repeat(1_500_000));
    assert!(maps.len() > 12_000_000 && (maps.len() as u64) < (16 << 20));
    let object = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"x\"}},\"data\":{maps}}}"
    );
    let list = format!("{{\"kind\":\"List\",\"items\":[{object}]}}");
    // 300 keys of 64 KiB: the keys are text of the object too.
    let keys: String = (0..300)
        .map(|i| format!("\"{i}{}\":0,", "k".repeat(64 << 10)))
        .collect();
    let long_keys = format!("{{{keys}\"kind\":\"ConfigMap\"}}");
    let rules = bundled_rules();
    for (what, input, said) in [
        ("one object", object, "once parsed"),
        ("a List item", list, "once parsed"),
        ("long keys", long_keys, "larger than 16 MiB"),
    ] {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), &input).expect("write");
        let audited = measured(
            &["audit".as_ref(), rules.as_os_str(), "-".as_ref()],
            Some(file.path()),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(audited.code, Some(2), "{what}: {}", audited.stderr);
        assert!(audited.stderr.contains(said), "{what}: {}", audited.stderr);
        let peak = audited.peak_rss_kib * 1024;
        assert!(
            peak < 256 << 20,
            "{what}: kadmit audit peaked at {:.0} MiB",
            mib(peak)
        );
    }
}
