//! The recent-denials ring: the last N rule denials in memory, served newest
//! first by `GET /api/denials` and shown on the dashboard.
//!
//! Metrics say how often each rule rejects; this says *what* it rejected, so
//! an operator can find the object and the user without the API server's
//! audit log. It is deliberately small and lossy: at most a fixed number of
//! entries (`--denials-capacity`, 0 turns it off) and a fixed number of bytes
//! (`--denials-max-bytes`), nothing on disk, gone at restart.
//!
//! Every field is cut before it is kept ([`crate::excerpt`]): each string
//! taken from a review (uid, names, namespace, user, resource) to
//! [`MAX_FIELD_BYTES`], the rule's message to [`MAX_MESSAGE_BYTES`]. So an
//! entry has a fixed largest size, and the ring's memory and the
//! `/api/denials` body are bounded whatever the reviews hold.
//!
//! Cost on the request path: nothing for an allowed review. A denied review
//! builds its entries first and then takes the lock only to push them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::{Serialize, Serializer};

use crate::eval::{Outcome, Verdict};
use crate::excerpt::{self, MAX_FIELD_BYTES, MAX_MESSAGE_BYTES};
use crate::review::{Embedded, Operation, Request};

/// Default of `--denials-capacity`.
pub const DEFAULT_CAPACITY: usize = 200;

/// Default of `--denials-max-bytes`: room for the default capacity of
/// entries of ordinary size (a few hundred bytes each), and a hard cap when
/// the entries are as large as cutting allows (15,727 bytes measured with
/// every field cut and made of control characters, each escaped to six
/// bytes: 66 such entries).
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;

/// One rule's denial of one review.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DenialRecord {
    /// When it was denied (RFC 3339, milliseconds).
    #[serde(serialize_with = "rfc3339")]
    pub time: SystemTime,
    /// Rule set of the denying rule.
    pub rule_set: Arc<str>,
    /// The denying rule.
    pub rule: Arc<str>,
    /// Status code of the denial.
    pub code: u16,
    /// The admission operation.
    pub operation: Operation,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// Namespace of the object; absent for cluster-scoped objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the object; absent when the API server had not named it yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `metadata.generateName` of an object created without a name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// The requesting user.
    pub user: String,
    /// The rule's messages, one per violation, joined with `; `.
    pub message: String,
    /// The review's uid, to find it in the API server's audit log.
    pub uid: String,
    /// True for a dry run (`kubectl --dry-run=server`): nothing was stored
    /// either way.
    pub dry_run: bool,
}

fn rfc3339<S: Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_rfc3339_millis(*time))
}

/// What `GET /api/denials` returns.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DenialsSnapshot {
    /// Entries the ring keeps.
    pub capacity: usize,
    /// Bytes the ring keeps (see [`DenialRecord::size_bytes`]).
    pub max_bytes: usize,
    /// Denials recorded since start, including those that fell out.
    pub recorded: u64,
    /// The entries, newest first.
    pub denials: Vec<Arc<DenialRecord>>,
}

impl DenialRecord {
    /// What the entry costs in memory, in bytes, and also what it takes in
    /// the JSON of `/api/denials`: the record, its `Arc`, and the text it
    /// owns, each character counted as JSON writes it (a control character
    /// is six bytes there, `\u001b`), so the ring's bound bounds that
    /// answer too. Rule and rule-set names are counted though they are
    /// shared with the plan, so the estimate errs on the high side.
    pub fn size_bytes(&self) -> usize {
        let optional = |text: &Option<String>| text.as_deref().map_or(0, json_text_len);
        std::mem::size_of::<DenialRecord>()
            + 2 * std::mem::size_of::<usize>()
            + json_text_len(&self.rule_set)
            + json_text_len(&self.rule)
            + json_text_len(&self.resource)
            + optional(&self.namespace)
            + optional(&self.name)
            + optional(&self.generate_name)
            + json_text_len(&self.user)
            + json_text_len(&self.message)
            + json_text_len(&self.uid)
    }
}

/// The bytes `text` takes as a JSON string's contents, at most: a control
/// character as `\u00XX`, a quote or backslash escaped.
fn json_text_len(text: &str) -> usize {
    text.bytes()
        .map(|byte| match byte {
            0..=0x1f => 6,
            b'"' | b'\\' => 2,
            _ => 1,
        })
        .sum()
}

/// A bounded ring of the most recent denials, shared by every worker.
#[derive(Debug)]
pub struct Denials {
    capacity: usize,
    max_bytes: usize,
    recorded: AtomicU64,
    ring: Mutex<Ring>,
}

/// The entries and the sum of their [`DenialRecord::size_bytes`].
#[derive(Debug, Default)]
struct Ring {
    entries: VecDeque<Arc<DenialRecord>>,
    bytes: usize,
}

impl Default for Denials {
    fn default() -> Self {
        Denials::new(DEFAULT_CAPACITY)
    }
}

impl Denials {
    /// A ring keeping the last `capacity` denials within
    /// [`DEFAULT_MAX_BYTES`]; 0 keeps none.
    pub fn new(capacity: usize) -> Self {
        Denials::with_limits(capacity, DEFAULT_MAX_BYTES)
    }

    /// A ring keeping the last `capacity` denials, evicting the oldest so
    /// that their total [`DenialRecord::size_bytes`] stays within
    /// `max_bytes`; 0 for either keeps none.
    pub fn with_limits(capacity: usize, max_bytes: usize) -> Self {
        Denials {
            capacity,
            max_bytes,
            recorded: AtomicU64::new(0),
            // Not preallocated: a large capacity costs memory only as
            // entries arrive.
            ring: Mutex::new(Ring::default()),
        }
    }

    /// Bytes the ring may hold.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Entries the ring keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records one entry per denying rule of `verdict`. Call it only for a
    /// denied verdict; an allowed one has no denying rules and costs a scan
    /// of its findings.
    pub fn record(&self, request: &Request, verdict: &Verdict) {
        if self.capacity == 0 || self.max_bytes == 0 {
            return;
        }
        let time = SystemTime::now();
        let mut built: Vec<Arc<DenialRecord>> = Vec::new();
        let mut names: Option<ObjectNames> = None;
        for finding in &verdict.findings {
            if finding.outcome != Outcome::Denied {
                continue;
            }
            let names = names.get_or_insert_with(|| ObjectNames::of(request));
            built.push(Arc::new(DenialRecord {
                time,
                rule_set: shared_field(&finding.rule_set),
                rule: shared_field(&finding.rule),
                code: finding.code.unwrap_or(403),
                operation: request.operation,
                resource: resource(request),
                namespace: request
                    .namespace
                    .as_deref()
                    .filter(|ns| !ns.is_empty())
                    .map(excerpt::field),
                name: names.name.clone(),
                generate_name: names.generate_name.clone(),
                user: excerpt::field(&request.user_info.username),
                message: message(&finding.messages),
                uid: excerpt::field(&request.uid),
                dry_run: request.dry_run.unwrap_or(false),
            }));
        }
        if built.is_empty() {
            return;
        }
        self.recorded
            .fetch_add(built.len() as u64, Ordering::Relaxed);
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        for record in built {
            let size = record.size_bytes();
            // Only with a budget below one entry's size (a misconfiguration):
            // such an entry could never be kept.
            if size > self.max_bytes {
                continue;
            }
            while ring.entries.len() >= self.capacity || ring.bytes + size > self.max_bytes {
                match ring.entries.pop_front() {
                    Some(oldest) => ring.bytes -= oldest.size_bytes(),
                    None => break,
                }
            }
            ring.bytes += size;
            ring.entries.push_back(record);
        }
    }

    /// The entries' total [`DenialRecord::size_bytes`].
    pub fn size_bytes(&self) -> usize {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }

    /// The entries, newest first.
    pub fn snapshot(&self) -> DenialsSnapshot {
        let denials: Vec<Arc<DenialRecord>> = {
            let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
            ring.entries.iter().rev().cloned().collect()
        };
        DenialsSnapshot {
            capacity: self.capacity,
            max_bytes: self.max_bytes,
            recorded: self.recorded.load(Ordering::Relaxed),
            denials,
        }
    }
}

/// The object's name, or its `generateName` when the API server has not
/// named it yet (a Pod of a ReplicaSet on CREATE).
#[derive(Debug, Default)]
struct ObjectNames {
    name: Option<String>,
    generate_name: Option<String>,
}

impl ObjectNames {
    fn of(request: &Request) -> Self {
        let name = request
            .name
            .as_deref()
            .filter(|name| !name.is_empty())
            .map(excerpt::field);
        if name.is_some() {
            return ObjectNames {
                name,
                generate_name: None,
            };
        }
        // Only on the denial path: read just the metadata names out of the
        // raw object (or the old object, for a DELETE).
        let document = request.object.as_ref().or(request.old_object.as_ref());
        document.and_then(metadata_names).unwrap_or_default()
    }
}

fn metadata_names(document: &Embedded) -> Option<ObjectNames> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        generate_name: Option<String>,
    }
    let object: Object = document.deserialize_into().ok()?;
    let name = object
        .metadata
        .name
        .filter(|n| !n.is_empty())
        .map(|n| excerpt::field(&n));
    let generate_name = match name {
        Some(_) => None,
        None => object
            .metadata
            .generate_name
            .filter(|n| !n.is_empty())
            .map(|n| excerpt::field(&n)),
    };
    Some(ObjectNames {
        name,
        generate_name,
    })
}

/// A rule or rule-set name: the plan's own `Arc` when it fits, a cut copy
/// otherwise (names come from rule files, not requests, but a rule file
/// should not be able to grow the ring either).
fn shared_field(name: &Arc<str>) -> Arc<str> {
    match excerpt::cut(name, MAX_FIELD_BYTES) {
        std::borrow::Cow::Borrowed(_) => name.clone(),
        std::borrow::Cow::Owned(short) => Arc::from(short),
    }
}

/// `resource` or `resource/subresource`, each part cut.
fn resource(request: &Request) -> String {
    let resource = excerpt::cut(&request.resource.resource, MAX_FIELD_BYTES);
    match request.sub_resource() {
        "" => resource.into_owned(),
        sub => format!("{resource}/{}", excerpt::cut(sub, MAX_FIELD_BYTES)),
    }
}

/// The rule's messages joined with `; `, cut to [`MAX_MESSAGE_BYTES`]
/// without joining more than fits (a message can render object values).
fn message(messages: &[String]) -> String {
    let mut joined = String::new();
    for (i, message) in messages.iter().enumerate() {
        if joined.len() > MAX_MESSAGE_BYTES {
            break;
        }
        if i > 0 {
            joined.push_str("; ");
        }
        joined.push_str(&excerpt::cut(message, MAX_MESSAGE_BYTES + 1));
    }
    excerpt::cut(&joined, MAX_MESSAGE_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::Finding;

    fn request(name: Option<&str>, object: &str) -> Request {
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "uid-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "team-a",
                "name": name,
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": serde_json::from_str::<serde_json::Value>(object).expect("object"),
                "dryRun": true
            }
        });
        crate::review::decode(&serde_json::to_vec(&body).expect("serialize"))
            .expect("a valid review")
            .request
    }

    fn finding(rule: &str, outcome: Outcome, messages: &[&str]) -> Finding {
        Finding {
            rule_set: Arc::from("security"),
            rule: Arc::from(rule),
            outcome,
            messages: messages.iter().map(|m| (*m).to_owned()).collect(),
            more_messages: 0,
            code: (outcome == Outcome::Denied).then_some(422),
        }
    }

    fn denied(findings: Vec<Finding>) -> Verdict {
        Verdict {
            allowed: false,
            findings,
            ..Verdict::default()
        }
    }

    #[test]
    fn one_entry_per_denying_rule_with_the_reviews_facts() {
        let denials = Denials::new(10);
        let verdict = denied(vec![
            finding("no-root", Outcome::Denied, &["runs as root", "privileged"]),
            finding("labels", Outcome::Warned, &["no team label"]),
            finding("no-latest", Outcome::Denied, &["uses :latest"]),
        ]);
        denials.record(
            &request(None, r#"{"metadata":{"generateName":"web-"}}"#),
            &verdict,
        );
        let snapshot = denials.snapshot();
        assert_eq!(snapshot.recorded, 2);
        let json = serde_json::to_value(&snapshot).expect("serialize");
        let newest = &json["denials"][0];
        assert_eq!(newest["rule"], "no-latest", "{json}");
        let first = &json["denials"][1];
        assert_eq!(first["ruleSet"], "security");
        assert_eq!(first["rule"], "no-root");
        assert_eq!(first["code"], 422);
        assert_eq!(first["operation"], "CREATE");
        assert_eq!(first["resource"], "pods");
        assert_eq!(first["namespace"], "team-a");
        assert_eq!(first["generateName"], "web-");
        assert!(first.get("name").is_none(), "{first}");
        assert_eq!(first["user"], "alice");
        assert_eq!(first["message"], "runs as root; privileged");
        assert_eq!(first["uid"], "uid-1");
        assert_eq!(first["dryRun"], true);
        let time = first["time"].as_str().expect("time");
        assert!(humantime::parse_rfc3339(time).is_ok(), "{time}");
    }

    #[test]
    fn the_request_name_wins_over_the_object() {
        let denials = Denials::new(1);
        let verdict = denied(vec![finding("r", Outcome::Denied, &["m"])]);
        denials.record(
            &request(Some("given"), r#"{"metadata":{"name":"other"}}"#),
            &verdict,
        );
        let record = &denials.snapshot().denials[0];
        assert_eq!(record.name.as_deref(), Some("given"));
        assert_eq!(record.generate_name, None);
    }

    #[test]
    fn the_ring_keeps_the_newest_and_counts_all() {
        let denials = Denials::new(3);
        let request = request(Some("p"), "{}");
        for n in 0..5 {
            let rule = format!("rule-{n}");
            denials.record(
                &request,
                &denied(vec![finding(&rule, Outcome::Denied, &["m"])]),
            );
        }
        let snapshot = denials.snapshot();
        assert_eq!(snapshot.recorded, 5);
        let rules: Vec<&str> = snapshot.denials.iter().map(|d| &*d.rule).collect();
        assert_eq!(rules, ["rule-4", "rule-3", "rule-2"]);
    }

    #[test]
    fn capacity_zero_keeps_nothing() {
        let denials = Denials::new(0);
        let verdict = denied(vec![finding("r", Outcome::Denied, &["m"])]);
        denials.record(&request(Some("p"), "{}"), &verdict);
        let snapshot = denials.snapshot();
        assert!(snapshot.denials.is_empty());
        assert_eq!(snapshot.recorded, 0);
    }

    #[test]
    fn long_messages_are_cut_to_the_limit() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = message(&[long.clone(), long]);
        assert!(cut.len() <= MAX_MESSAGE_BYTES, "{}", cut.len());
        assert!(cut.ends_with(" bytes]"), "{cut}");
        let exact = "a".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(message(std::slice::from_ref(&exact)), exact);
        assert_eq!(message(&["a".into(), "b".into()]), "a; b");
    }

    /// Issue 11: every field taken from the review is cut, not only the
    /// message.
    #[test]
    fn every_field_from_the_review_is_cut() {
        let huge = "x".repeat(1 << 20);
        let mut request = request(Some(&huge), "{}");
        request.uid = huge.clone();
        request.namespace = Some(huge.clone());
        request.user_info.username = huge.clone();
        request.resource.resource = huge.clone();
        request.sub_resource = Some(huge.clone());
        let denials = Denials::new(10);
        let mut long_rule = finding(&huge, Outcome::Denied, &[&huge, &huge]);
        long_rule.rule_set = Arc::from(huge.as_str());
        denials.record(&request, &denied(vec![long_rule]));
        let record = &denials.snapshot().denials[0];
        let json = serde_json::to_value(&**record).expect("serialize");
        for field in ["ruleSet", "rule", "namespace", "name", "user", "uid"] {
            let value = json[field].as_str().unwrap_or_default();
            assert!(
                !value.is_empty() && value.len() <= MAX_FIELD_BYTES,
                "{field}: {} bytes",
                value.len()
            );
        }
        assert!(record.resource.len() <= 2 * MAX_FIELD_BYTES + 1);
        assert!(record.message.len() <= MAX_MESSAGE_BYTES);
        // Everything an entry can hold, with room for the record itself.
        assert!(record.size_bytes() < 8 * MAX_FIELD_BYTES + MAX_MESSAGE_BYTES + 512);
    }

    #[test]
    fn the_byte_budget_evicts_the_oldest_and_bounds_the_total() {
        let request = request(Some("p"), "{}");
        let entry = |n: usize| {
            denied(vec![finding(
                &format!("rule-{n}"),
                Outcome::Denied,
                &[&"m".repeat(600)],
            )])
        };
        let one = {
            let probe = Denials::new(1);
            probe.record(&request, &entry(0));
            probe.size_bytes()
        };
        // Room for two and a half entries: the ring holds two.
        let denials = Denials::with_limits(100, one * 5 / 2);
        for n in 0..10 {
            denials.record(&request, &entry(n));
            assert!(denials.size_bytes() <= denials.max_bytes());
        }
        let snapshot = denials.snapshot();
        assert_eq!(snapshot.recorded, 10);
        let rules: Vec<&str> = snapshot.denials.iter().map(|d| &*d.rule).collect();
        assert_eq!(rules, ["rule-9", "rule-8"]);
        let sum: usize = snapshot.denials.iter().map(|d| d.size_bytes()).sum();
        assert_eq!(sum, denials.size_bytes());

        // A budget smaller than one entry keeps nothing, without looping.
        let tiny = Denials::with_limits(100, one - 1);
        tiny.record(&request, &entry(0));
        assert!(tiny.snapshot().denials.is_empty());
    }

    /// A control character takes six bytes in JSON (`\u0001`): counted as
    /// one, 250 denials of such names made `/api/denials` 2.4 MB under a
    /// 1 MiB bound.
    #[test]
    fn the_byte_budget_bounds_the_json_answer_whatever_the_fields_hold() {
        let name = "\u{1}".repeat(250);
        let request = request(Some(&name), "{}");
        let message = "\u{2}\"\\".repeat(300);
        let denials = Denials::with_limits(10_000, 64 << 10);
        for n in 0..200 {
            denials.record(
                &request,
                &denied(vec![finding(
                    &format!("r{n}"),
                    Outcome::Denied,
                    &[&message],
                )]),
            );
        }
        let snapshot = denials.snapshot();
        assert!(snapshot.denials.len() > 5, "{}", snapshot.denials.len());
        let answer = serde_json::to_vec(&snapshot).expect("serialize");
        assert!(
            answer.len() <= denials.max_bytes(),
            "{} bytes of JSON for a {}-byte ring",
            answer.len(),
            denials.max_bytes()
        );
    }
}
