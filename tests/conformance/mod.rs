//! The bundled Pod Security Standards rule sets against the fixtures
//! Kubernetes' own Pod Security Admission (PSA) is tested with.
//!
//! The fixtures are third-party data (Apache-2.0, the Kubernetes Authors)
//! kept beside the repository, not in it:
//! `../shared/conformance/pod-security-admission/` (its README says which
//! commit and version). Without them these tests print why and pass on a
//! developer machine, and fail under `CI=true`.
//!
//! What must hold, for every fixture, and every disagreement is reported at
//! once:
//!
//! - `pod-security-baseline` denies every `baseline/fail/` Pod and admits
//!   every `baseline/pass/` and `restricted/pass/` Pod;
//! - `pod-security-restricted` denies every `baseline/fail/` and
//!   `restricted/fail/` Pod and admits every `restricted/pass/` Pod;
//! - a denial names the control the fixture exercises (its file name prefix,
//!   e.g. `seccompprofile_baseline2` is rule `seccomp-profile-baseline`);
//! - the same holds for each Pod wrapped in every workload kind and in a
//!   PodTemplate, and for its containers added to a clean Pod as ephemeral
//!   containers (an UPDATE of `pods/ephemeralcontainers`);
//! - an UPDATE that changes only what the standards exempt (labels,
//!   annotations other than the security ones, `activeDeadlineSeconds`,
//!   tolerations) is admitted even for a violating Pod, and one that changes
//!   an image is checked again.

use std::path::{Path, PathBuf};

use crate::engine::evaluate;
use kadmit::eval::{Ask, Verdict};
use kadmit::plan::Mode;
use kadmit::plan::{Plan, compile};
use kadmit::review::{Operation, Request, ReviewVersion, encode};
use kadmit::rules::{SourceFile, load_files};
use kadmit::server::decide;
use kadmit::simulate::{ObjectOptions, request_for_object};
use serde_json::{Value, json};

const BASELINE: &str = "pod-security-baseline";
const RESTRICTED: &str = "pod-security-restricted";

/// The fixture version the rule sets follow.
const VERSION: &str = "v1.37";

/// One fixture Pod.
pub(crate) struct Fixture {
    /// `baseline` or `restricted`.
    level: &'static str,
    /// True for `pass/`.
    passes: bool,
    /// File name without `.yaml`.
    name: String,
    /// The PSA check it exercises, normalised (see [`normalise`]).
    check: String,
    /// The Pod, with the API server's defaults applied.
    pub(crate) pod: Value,
}

impl Fixture {
    pub(crate) fn label(&self) -> String {
        let verdict = if self.passes { "pass" } else { "fail" };
        format!("{}/{VERSION}/{verdict}/{}.yaml", self.level, self.name)
    }
}

/// The fixtures directory, or `None` after saying why it is missing.
pub(crate) fn fixtures_dir() -> Option<PathBuf> {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/pod-security-admission");
    if dir.join("baseline").is_dir() && dir.join("restricted").is_dir() {
        return Some(dir);
    }
    crate::external::missing(&format!(
        "the Pod Security Admission fixtures are not at {} (Kubernetes' own test data, kept beside the repository, not in it)",
        dir.display()
    ));
    None
}

/// A check name without separators or case: `seccompProfile_baseline`,
/// `seccompprofile_baseline` and `seccomp-profile-baseline` are one.
fn normalise(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Every fixture, sorted by path.
pub(crate) fn fixtures(dir: &Path) -> Vec<Fixture> {
    let mut out = Vec::new();
    for level in ["baseline", "restricted"] {
        for (sub, passes) in [("pass", true), ("fail", false)] {
            let folder = dir.join(level).join(VERSION).join(sub);
            let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
                .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
                .collect();
            files.sort();
            for path in files {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let mut pod: Value = serde_yaml::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                apply_api_defaults(&mut pod);
                let name = path
                    .file_stem()
                    .and_then(|stem| stem.to_str())
                    .unwrap_or_default()
                    .to_owned();
                let check = normalise(name.trim_end_matches(|c: char| c.is_ascii_digit()));
                out.push(Fixture {
                    level,
                    passes,
                    name,
                    check,
                    pod,
                });
            }
        }
    }
    out
}

/// What the API server does to a Pod before any admission webhook sees it,
/// as far as the fixtures need it: a volume with no source becomes an
/// `emptyDir` (`restricted/pass/restrictedvolumes0.yaml` has one; PSA's own
/// tests run after the same defaulting).
fn apply_api_defaults(pod: &mut Value) {
    let Some(volumes) = pod
        .pointer_mut("/spec/volumes")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for volume in volumes {
        if let Some(map) = volume.as_object_mut()
            && map.keys().all(|key| key == "name")
        {
            map.insert("emptyDir".to_owned(), json!({}));
        }
    }
}

/// The bundled rules (`rules/`) with the restricted profile
/// (`profiles/`), compiled together as a rules directory holding both.
fn bundled_plan() -> Plan {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["rules", "profiles"] {
        let dir = root.join(dir);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        paths.sort();
        for path in paths {
            files.push(SourceFile {
                name: path.display().to_string(),
                text: std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            });
        }
    }
    compile(&load_files(files)).unwrap_or_else(|d| panic!("the bundled rules do not compile:\n{d}"))
}

/// The verdict of `set` on `request`, checked to be the server's answer to
/// the same review: the server parses only the parts of the object the
/// rules read, the verdict here is reached on the whole object.
fn verdict(plan: &Plan, set: &str, request: &Request) -> Verdict {
    let id = plan
        .rule_set_id(set)
        .unwrap_or_else(|| panic!("no rule set {set} in rules/"));
    let verdict = evaluate(plan, request, Mode::Validate, Some(id))
        .unwrap_or_else(|e| panic!("{set}: evaluation failed: {e}"));
    // Serialized from the struct, the request's fields come in the API
    // server's order, before the object.
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}}"#,
        serde_json::to_string(request).expect("a request serializes")
    );
    let (served_review, served) = decide(
        plan,
        body.as_bytes(),
        Ask::new(Mode::Validate).rule_sets(Some(id)),
    )
    .unwrap_or_else(|e| panic!("{set}: the server refused the review: {e}"));
    assert!(
        !served_review.objects_came_early,
        "{set}: the object came first"
    );
    let answer = |verdict: &Verdict| {
        let response = verdict.response(Mode::Validate);
        String::from_utf8_lossy(&encode(ReviewVersion::V1, &request.uid, &response)).into_owned()
    };
    assert_eq!(
        answer(&served),
        answer(&verdict),
        "{set}: the server decides otherwise"
    );
    verdict
}

/// A CREATE (or the given options) of `object`.
fn request(object: Value, options: &ObjectOptions) -> Request {
    request_for_object(object, options).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn create(object: Value) -> Request {
    request(object, &ObjectOptions::default())
}

/// The sets that must agree with a fixture, and whether they must admit it.
fn expectations(fixture: &Fixture) -> Vec<(&'static str, bool)> {
    match (fixture.level, fixture.passes) {
        ("baseline", true) => vec![(BASELINE, true)],
        ("baseline", false) => vec![(BASELINE, false), (RESTRICTED, false)],
        ("restricted", true) => vec![(BASELINE, true), (RESTRICTED, true)],
        _ => vec![(RESTRICTED, false)],
    }
}

/// What is wrong with `verdict` for `fixture` under `set`, if anything.
fn disagreement(fixture: &Fixture, set: &str, admit: bool, verdict: &Verdict) -> Option<String> {
    let fired: Vec<String> = verdict
        .findings
        .iter()
        .map(|finding| format!("{}: {}", finding.rule, finding.messages.join("; ")))
        .collect();
    match (admit, verdict.allowed) {
        (true, true) => None,
        (true, false) => Some(format!("{set} denied it: {}", fired.join(" | "))),
        (false, true) => Some(format!(
            "{set} admitted it (check {} not enforced)",
            fixture.check
        )),
        (false, false) => {
            let named = verdict
                .findings
                .iter()
                .any(|finding| normalise(&finding.rule) == fixture.check);
            (!named).then(|| {
                format!(
                    "{set} denied it, but not by rule {}: {}",
                    fixture.check,
                    fired.join(" | ")
                )
            })
        }
    }
}

/// Runs every fixture through `shape` (which turns a fixture Pod into the
/// requests to check, each with a label) and fails with every disagreement.
fn check_all(shape: impl Fn(&Value) -> Vec<(String, Request)>) {
    let Some(dir) = fixtures_dir() else {
        return;
    };
    let plan = bundled_plan();
    let fixtures = fixtures(&dir);
    assert!(
        fixtures.len() >= 140,
        "expected the {VERSION} fixtures, found {}",
        fixtures.len()
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for fixture in &fixtures {
        for (label, request) in shape(&fixture.pod) {
            for (set, admit) in expectations(fixture) {
                checked += 1;
                let verdict = verdict(&plan, set, &request);
                if let Some(problem) = disagreement(fixture, set, admit, &verdict) {
                    problems.push(format!("{} as {label}: {problem}", fixture.label()));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {checked} verdicts disagree with Pod Security Admission {VERSION}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_fixture_pod_gets_the_verdict_of_pod_security_admission() {
    check_all(|pod| vec![("a Pod".to_owned(), create(pod.clone()))]);
}

/// The Pod's metadata and spec as a pod template.
fn template(pod: &Value) -> Value {
    let mut metadata = pod.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if let Some(map) = metadata.as_object_mut() {
        map.remove("name");
        map.insert("labels".to_owned(), json!({"app": "conformance"}));
    }
    json!({"metadata": metadata, "spec": pod.get("spec").cloned().unwrap_or(Value::Null)})
}

/// The Pod wrapped in each kind that carries a pod template.
pub(crate) fn workloads(pod: &Value) -> Vec<(String, Value)> {
    let template = template(pod);
    let selector = json!({"matchLabels": {"app": "conformance"}});
    let workload = |api_version: &str, kind: &str, spec: Value| {
        (
            kind.to_owned(),
            json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"name": "conformance"},
                "spec": spec,
            }),
        )
    };
    let mut job_template = template.clone();
    if let Some(spec) = job_template.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("restartPolicy".to_owned(), json!("Never"));
    }
    vec![
        workload(
            "apps/v1",
            "Deployment",
            json!({"selector": selector, "template": template}),
        ),
        workload(
            "apps/v1",
            "StatefulSet",
            json!({"selector": selector, "serviceName": "conformance", "template": template}),
        ),
        workload(
            "apps/v1",
            "DaemonSet",
            json!({"selector": selector, "template": template}),
        ),
        workload(
            "apps/v1",
            "ReplicaSet",
            json!({"selector": selector, "template": template}),
        ),
        workload("batch/v1", "Job", json!({"template": job_template})),
        workload(
            "batch/v1",
            "CronJob",
            json!({"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": job_template}}}),
        ),
        (
            "PodTemplate".to_owned(),
            json!({
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "conformance"},
                "template": template,
            }),
        ),
    ]
}

#[test]
fn workloads_and_pod_templates_get_the_verdict_of_their_pod() {
    check_all(|pod| {
        workloads(pod)
            .into_iter()
            .map(|(kind, object)| (format!("a {kind}"), create(object)))
            .collect()
    });
}

/// A container every level admits, setting at container level what
/// restricted asks of every container when the pod level does not.
fn clean_container(name: &str) -> Value {
    json!({
        "name": name,
        "image": "registry.k8s.io/pause",
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    })
}

/// The fixture Pod with clean containers, before (old) and after (new) its
/// own containers and init containers were added as ephemeral containers.
fn with_ephemeral_containers(pod: &Value) -> (Value, Value) {
    let mut old = pod.clone();
    let mut ephemeral = Vec::new();
    if let Some(spec) = old.get_mut("spec").and_then(Value::as_object_mut) {
        for field in ["containers", "initContainers"] {
            if let Some(Value::Array(list)) = spec.remove(field) {
                ephemeral.extend(list);
            }
        }
        spec.insert("containers".to_owned(), json!([clean_container("app")]));
    }
    let mut new = old.clone();
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("ephemeralContainers".to_owned(), Value::Array(ephemeral));
    }
    (old, new)
}

#[test]
fn ephemeral_containers_get_the_verdict_of_the_containers_they_copy() {
    check_all(|pod| {
        let (old, new) = with_ephemeral_containers(pod);
        let options = ObjectOptions {
            operation: Operation::Update,
            old: Some(old),
            sub_resource: Some("ephemeralcontainers".to_owned()),
            ..ObjectOptions::default()
        };
        vec![(
            "ephemeral containers (pods/ephemeralcontainers)".to_owned(),
            request(new, &options),
        )]
    });
}

/// `pod` after `change`, as an UPDATE from `pod`.
fn update(pod: &Value, change: impl Fn(&mut Value)) -> Request {
    let mut new = pod.clone();
    change(&mut new);
    let options = ObjectOptions {
        operation: Operation::Update,
        old: Some(pod.clone()),
        ..ObjectOptions::default()
    };
    request(new, &options)
}

/// Sets `field` in the map at `pointer` of `pod`, creating that map (one
/// level) when it is missing.
fn set(pod: &mut Value, pointer: &str, field: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    if pod.pointer(pointer).is_none_or(Value::is_null)
        && let Some(map) = pod.pointer_mut(parent).and_then(Value::as_object_mut)
    {
        map.insert(last.to_owned(), json!({}));
    }
    if let Some(map) = pod.pointer_mut(pointer).and_then(Value::as_object_mut) {
        map.insert(field.to_owned(), value);
    }
}

#[test]
fn updates_that_change_only_exempt_fields_are_not_rechecked() {
    let Some(dir) = fixtures_dir() else {
        return;
    };
    let plan = bundled_plan();
    let mut problems = Vec::new();
    let failing: Vec<Fixture> = fixtures(&dir)
        .into_iter()
        .filter(|fixture| !fixture.passes)
        .collect();
    assert!(!failing.is_empty());
    for fixture in &failing {
        let pod = &fixture.pod;
        let exempt: [(&str, Request); 4] = [
            (
                "a new label",
                update(pod, |p| {
                    set(p, "/metadata/labels", "team", json!("web"));
                }),
            ),
            (
                "a new unrelated annotation",
                update(pod, |p| {
                    set(p, "/metadata/annotations", "example.com/note", json!("x"));
                }),
            ),
            (
                "activeDeadlineSeconds",
                update(pod, |p| {
                    set(p, "/spec", "activeDeadlineSeconds", json!(600));
                }),
            ),
            (
                "a toleration",
                update(pod, |p| {
                    set(
                        p,
                        "/spec",
                        "tolerations",
                        json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]),
                    );
                }),
            ),
        ];
        let significant = update(pod, |p| {
            if let Some(container) = p.pointer_mut("/spec/containers/0")
                && let Some(map) = container.as_object_mut()
            {
                map.insert("image".to_owned(), json!("registry.k8s.io/pause:3.10"));
            }
        });
        for (set_name, _) in expectations(fixture) {
            for (what, request) in &exempt {
                let verdict = verdict(&plan, set_name, request);
                if !verdict.allowed {
                    problems.push(format!(
                        "{}: {set_name} denied an update changing only {what}",
                        fixture.label()
                    ));
                }
            }
            let verdict = verdict(&plan, set_name, &significant);
            if let Some(problem) = disagreement(fixture, set_name, false, &verdict) {
                problems.push(format!("{} with a new image: {problem}", fixture.label()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Runs without the fixtures: the profile compiles beside the bundled
/// rules, and restricted holds every baseline rule, under its own name.
#[test]
fn the_restricted_profile_compiles_with_the_bundled_rules_and_holds_baseline() {
    let plan = bundled_plan();
    let rules_of = |set: &str| -> Vec<String> {
        plan.rules()
            .iter()
            .filter(|rule| &*rule.rule_set_name == set)
            .map(|rule| rule.name.to_string())
            .collect()
    };
    let baseline = rules_of(BASELINE);
    let restricted = rules_of(RESTRICTED);
    assert_eq!(baseline.len(), 12, "{baseline:?}");
    assert_eq!(restricted.len(), 12 + 7, "{restricted:?}");
    assert_eq!(restricted[..12], baseline[..]);
}
