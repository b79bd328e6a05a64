//! The recent-denials ring: the last N rule denials in memory, served newest
//! first by `GET /api/denials` and shown on the dashboard.
//!
//! Metrics say how often each rule rejects; this says *what* it rejected, so
//! an operator can find the object and the user without the API server's
//! audit log. It is deliberately small and lossy: a fixed number of entries
//! (`--denials-capacity`, 0 turns it off), nothing on disk, gone at restart.
//!
//! Cost on the request path: nothing for an allowed review. A denied review
//! builds its entries first and then takes the lock only to push them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::{Serialize, Serializer};

use crate::eval::{Outcome, Verdict};
use crate::review::{Embedded, Operation, Request};

/// Default of `--denials-capacity`.
pub const DEFAULT_CAPACITY: usize = 200;

/// Longest message kept per entry, in characters; longer ones are cut with
/// `…`. A rule can render object values into its message, and the ring must
/// stay small whatever the objects hold.
pub const MAX_MESSAGE_CHARS: usize = 1024;

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
    /// Denials recorded since start, including those that fell out.
    pub recorded: u64,
    /// The entries, newest first.
    pub denials: Vec<Arc<DenialRecord>>,
}

/// A bounded ring of the most recent denials, shared by every worker.
#[derive(Debug)]
pub struct Denials {
    capacity: usize,
    recorded: AtomicU64,
    ring: Mutex<VecDeque<Arc<DenialRecord>>>,
}

impl Default for Denials {
    fn default() -> Self {
        Denials::new(DEFAULT_CAPACITY)
    }
}

impl Denials {
    /// A ring keeping the last `capacity` denials; 0 keeps none.
    pub fn new(capacity: usize) -> Self {
        Denials {
            capacity,
            recorded: AtomicU64::new(0),
            ring: Mutex::new(VecDeque::with_capacity(capacity)),
        }
    }

    /// Entries the ring keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records one entry per denying rule of `verdict`. Call it only for a
    /// denied verdict; an allowed one has no denying rules and costs a scan
    /// of its findings.
    pub fn record(&self, request: &Request, verdict: &Verdict) {
        if self.capacity == 0 {
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
                rule_set: finding.rule_set.clone(),
                rule: finding.rule.clone(),
                code: finding.code.unwrap_or(403),
                operation: request.operation,
                resource: request.resource_label(),
                namespace: request.namespace.clone().filter(|ns| !ns.is_empty()),
                name: names.name.clone(),
                generate_name: names.generate_name.clone(),
                user: request.user_info.username.clone(),
                message: truncate(&finding.messages.join("; ")),
                uid: request.uid.clone(),
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
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(record);
        }
    }

    /// The entries, newest first.
    pub fn snapshot(&self) -> DenialsSnapshot {
        let denials: Vec<Arc<DenialRecord>> = {
            let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
            ring.iter().rev().cloned().collect()
        };
        DenialsSnapshot {
            capacity: self.capacity,
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
        let name = request.name.clone().filter(|name| !name.is_empty());
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
    let name = object.metadata.name.filter(|n| !n.is_empty());
    let generate_name = match name {
        Some(_) => None,
        None => object.metadata.generate_name.filter(|n| !n.is_empty()),
    };
    Some(ObjectNames {
        name,
        generate_name,
    })
}

/// `message`, or its first [`MAX_MESSAGE_CHARS`]` - 1` characters and `…`.
fn truncate(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message.to_owned();
    }
    let end = message
        .char_indices()
        .nth(MAX_MESSAGE_CHARS - 1)
        .map_or(message.len(), |(index, _)| index);
    let mut short = message[..end].to_owned();
    short.push('…');
    short
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
        let long = "é".repeat(MAX_MESSAGE_CHARS + 5);
        let cut = truncate(&long);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS);
        assert!(cut.ends_with('…'));
        let exact = "a".repeat(MAX_MESSAGE_CHARS);
        assert_eq!(truncate(&exact), exact);
    }
}
