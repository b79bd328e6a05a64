//! `kadmit webhook-config --diff INSTALLED`: what the webhook configurations
//! installed in a cluster send to kadmit, against what the rules need.
//!
//! A rule whose requests the API server never sends to kadmit looks active
//! (`kadmit check` passes, `kadmit test` denies) and enforces nothing: the
//! configuration was generated from older rules, an entry was edited, a
//! namespace was excluded by hand. [`compare`] finds, for every rule set and
//! every (operation, group, version, resource, scope) its rules match,
//! whether an installed entry that calls kadmit at a path serving that rule
//! set would send it, with a namespace and object selector no narrower than
//! the rule's, no `matchConditions` but the rule set's own, `matchPolicy:
//! Equivalent`, a mutating entry's `reinvocationPolicy: IfNeeded`, and the
//! failure policy the rule set asks for. It also lists what installed
//! entries send that no rule of theirs needs.
//!
//! The installed configurations are read as `kubectl get
//! validatingwebhookconfigurations,mutatingwebhookconfigurations -o yaml`
//! prints them (a `kind: List`), or as a YAML stream of the configurations
//! themselves, under the bounds of a rule file ([`crate::rules::limits`]).

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    ALL_OPERATIONS, ALL_SCOPES, Atom, CheckedSet, Client, EntryCommon, GenerateError, Kind,
    OPERATIONS, Options, SCOPES, label_selector, rank, rule_set_names, served_sets,
};
use crate::plan::Plan;
use crate::rules::{Diagnostic, FailurePolicy, OperationPattern, Scope, limits};

/// A webhook entry as the comparison needs it, from either kind of
/// configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct InstalledEntry {
    /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
    kind: Kind,
    /// `metadata.name` of its configuration.
    configuration: String,
    /// The entry's `name`.
    name: String,
    client_config: WebhookClientConfig,
    rules: Vec<RuleWithOperations>,
    namespace_selector: Option<meta::LabelSelector>,
    object_selector: Option<meta::LabelSelector>,
    /// `Fail` when absent, the API's default.
    failure_policy: String,
    /// Its `matchConditions`, as (name, expression).
    match_conditions: Vec<(String, String)>,
    /// `Equivalent` when absent, the API's default.
    match_policy: String,
    /// A mutating entry's, `Never` when absent (the API's default); `None`
    /// for a validating one.
    reinvocation_policy: Option<String>,
    /// What its rules send, expanded once.
    atoms: Vec<Atom>,
}

/// The most (operation, group, version, resource) combinations the
/// installed entries may expand to: a few lists of a hundred names each
/// multiply into millions, and every one is compared with every rule.
pub const MAX_INSTALLED_COMBINATIONS: usize = 50_000;

/// The most `matchConditions` one installed entry may have: the API's own
/// limit, so a file with more is no configuration the API server took.
pub const MAX_INSTALLED_ENTRY_CONDITIONS: usize = 64;

/// The most `matchConditions` the installed entries may have in all: each
/// is looked up for every rule set the entry serves.
pub const MAX_INSTALLED_CONDITIONS: usize = 4_096;

/// The most bytes of one installed `matchConditions` expression (the API
/// server bounds their cost, not their length): each is compared whole.
pub const MAX_INSTALLED_CONDITION_BYTES: usize = 64 << 10;

/// The webhook configurations read from a file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Installed {
    entries: Vec<InstalledEntry>,
    /// Objects of other kinds in the file, which are not compared.
    pub ignored: usize,
}

/// Why an installed-configurations file cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum InstalledError {
    /// Too large, too deep, too many aliases, or not YAML.
    #[error("{0}")]
    Bounds(Diagnostic),
    /// A document is YAML but not an object of the expected shape.
    #[error("{file}: {at}: {message}")]
    Shape {
        /// The file.
        file: String,
        /// Which document or item.
        at: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads `text` (named `file` in errors): JSON, or a YAML stream, whose documents are
/// Validating- or MutatingWebhookConfigurations, or `kind: List`s of them.
/// Objects of other kinds are counted in [`Installed::ignored`].
pub fn read_installed(file: &str, text: &str) -> Result<Installed, InstalledError> {
    if text.len() as u64 > limits::MAX_FILE_BYTES {
        return Err(InstalledError::Bounds(limits::too_large(
            file,
            text.len() as u64,
        )));
    }
    let shape = |at: String, message: String| InstalledError::Shape {
        file: file.to_owned(),
        at,
        message,
    };
    let mut installed = Installed::default();
    // `kubectl get … -o json` is parsed as JSON: no aliases, and serde_json
    // bounds its depth. YAML is checked before the deserializer expands it.
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        installed.add_document("document 1", &value, &shape)?;
        return Ok(installed);
    }
    if let Some(diagnostic) = limits::check_structure(file, text, limits::MAX_NODES) {
        return Err(InstalledError::Bounds(diagnostic));
    }
    for (d, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let at = format!("document {}", d + 1);
        let value = Value::deserialize(document).map_err(|e| shape(at.clone(), e.to_string()))?;
        installed.add_document(&at, &value, &shape)?;
    }
    Ok(installed)
}

impl Installed {
    /// Adds the configurations of one document (`at`): one object, or the
    /// items of a `kind: List`.
    fn add_document(
        &mut self,
        at: &str,
        value: &Value,
        shape: &dyn Fn(String, String) -> InstalledError,
    ) -> Result<(), InstalledError> {
        match value.get("kind").and_then(Value::as_str) {
            None if value.is_null() => {}
            Some("List") => {
                let items = match value.get("items") {
                    Some(Value::Array(items)) => items.as_slice(),
                    None | Some(Value::Null) => &[],
                    Some(_) => return Err(shape(at.to_owned(), "items is not a list".to_owned())),
                };
                for (i, item) in items.iter().enumerate() {
                    self.add(item)
                        .map_err(|message| shape(format!("{at}, items[{i}]"), message))?;
                }
            }
            _ => self
                .add(value)
                .map_err(|message| shape(at.to_owned(), message))?,
        }
        Ok(())
    }

    fn add(&mut self, object: &Value) -> Result<(), String> {
        let kind = match object.get("kind").and_then(Value::as_str) {
            Some("MutatingWebhookConfiguration") => Kind::Mutating,
            Some("ValidatingWebhookConfiguration") => Kind::Validating,
            Some(_) => {
                self.ignored += 1;
                return Ok(());
            }
            None => return Err("an object without kind".to_owned()),
        };
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        if api_version != Some(super::API_VERSION) {
            return Err(format!(
                "apiVersion {api_version:?} is not {}",
                super::API_VERSION
            ));
        }
        let failure_policy = |policy: Option<String>| policy.unwrap_or_else(|| "Fail".to_owned());
        match kind {
            Kind::Mutating => {
                let configuration: MutatingWebhookConfiguration =
                    serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
                let name = configuration.metadata.name.unwrap_or_default();
                for webhook in configuration.webhooks.unwrap_or_default() {
                    self.push(InstalledEntry {
                        kind,
                        configuration: name.clone(),
                        name: webhook.name,
                        client_config: webhook.client_config,
                        rules: webhook.rules.unwrap_or_default(),
                        namespace_selector: webhook.namespace_selector,
                        object_selector: webhook.object_selector,
                        failure_policy: failure_policy(webhook.failure_policy),
                        match_conditions: conditions(webhook.match_conditions),
                        match_policy: match_policy(webhook.match_policy),
                        reinvocation_policy: Some(
                            webhook
                                .reinvocation_policy
                                .unwrap_or_else(|| "Never".to_owned()),
                        ),
                        atoms: Vec::new(),
                    })?;
                }
            }
            Kind::Validating => {
                let configuration: ValidatingWebhookConfiguration =
                    serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
                let name = configuration.metadata.name.unwrap_or_default();
                for webhook in configuration.webhooks.unwrap_or_default() {
                    self.push(InstalledEntry {
                        kind,
                        configuration: name.clone(),
                        name: webhook.name,
                        client_config: webhook.client_config,
                        rules: webhook.rules.unwrap_or_default(),
                        namespace_selector: webhook.namespace_selector,
                        object_selector: webhook.object_selector,
                        failure_policy: failure_policy(webhook.failure_policy),
                        match_conditions: conditions(webhook.match_conditions),
                        match_policy: match_policy(webhook.match_policy),
                        reinvocation_policy: None,
                        atoms: Vec::new(),
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Adds `entry`, expanding its rules, within [`MAX_INSTALLED_COMBINATIONS`]
    /// and the bounds of `matchConditions`.
    fn push(&mut self, mut entry: InstalledEntry) -> Result<(), String> {
        if entry.match_conditions.len() > MAX_INSTALLED_ENTRY_CONDITIONS {
            return Err(format!(
                "webhook {:?} has {} matchConditions, more than the {MAX_INSTALLED_ENTRY_CONDITIONS} \
                 the API allows; this is not a configuration the API server took",
                entry.name,
                entry.match_conditions.len()
            ));
        }
        if let Some((name, _)) = entry
            .match_conditions
            .iter()
            .find(|(_, expression)| expression.len() > MAX_INSTALLED_CONDITION_BYTES)
        {
            return Err(format!(
                "webhook {:?}: matchConditions {name:?} has an expression of more than \
                 {MAX_INSTALLED_CONDITION_BYTES} bytes, which --diff does not compare",
                entry.name
            ));
        }
        let conditions: usize = self
            .entries
            .iter()
            .map(|entry| entry.match_conditions.len())
            .sum();
        if conditions + entry.match_conditions.len() > MAX_INSTALLED_CONDITIONS {
            return Err(format!(
                "the webhooks have more than {MAX_INSTALLED_CONDITIONS} matchConditions in all, \
                 which --diff does not compare; compare fewer configurations at a time"
            ));
        }
        let so_far: usize = self.entries.iter().map(|entry| entry.atoms.len()).sum();
        entry.atoms = installed_atoms(&entry.rules, MAX_INSTALLED_COMBINATIONS - so_far)
            .ok_or_else(|| {
                format!(
                    "the webhook rules expand to more than {MAX_INSTALLED_COMBINATIONS} combinations of operation, group, version and resource"
                )
            })?;
        self.entries.push(entry);
        Ok(())
    }
}

/// Everything [`compare`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    /// Entries of the file that call kadmit.
    pub kadmit_entries: usize,
    /// Requests rules match that no installed entry sends as the rule needs
    /// (the rule enforces nothing for them), and entries that call kadmit
    /// at a path it refuses. Any of these makes `--diff` exit 1.
    pub not_sent: Vec<NotSent>,
    /// What installed entries send to kadmit that none of their rule sets'
    /// rules matches: calls that cost latency and, with `failurePolicy:
    /// Fail`, availability, for nothing.
    pub needless: Vec<Needless>,
}

impl Diff {
    /// True when every rule gets every request it matches.
    pub fn is_complete(&self) -> bool {
        self.not_sent.is_empty()
    }
}

/// Requests of one rule that the installed configuration does not send as needed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotSent {
    /// `mutate` or `validate`.
    pub endpoint: &'static str,
    /// The rule set (empty for an entry that names no rule set kadmit has).
    pub rule_set: String,
    /// The rules, in rule-set order (none when the problem is the entry's).
    pub rules: Vec<String>,
    /// The requests, as `CREATE pods` (`CREATE deployments.apps/v1 Namespaced`).
    pub requests: Vec<String>,
    /// Why.
    pub reason: String,
}

/// What one installed entry sends needlessly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Needless {
    /// `configuration/entry`.
    pub entry: String,
    /// The requests, as in [`NotSent::requests`].
    pub requests: Vec<String>,
    /// Why they are needless.
    pub reason: String,
}

/// Compares `installed` with what the rules of `plan` need, for kadmit
/// reached as `options.client` says.
pub fn compare(
    plan: &Plan,
    options: &Options,
    installed: &Installed,
) -> Result<Diff, GenerateError> {
    let sets = served_sets(plan);
    let context = EntryCommon {
        options,
        ca_bundle: None,
    };
    let mut diff = Diff::default();
    // The installed entries that call kadmit, with the rule sets they serve
    // (`None`: the catch-all path, every rule set).
    let mut calling: Vec<(&InstalledEntry, Option<Vec<&CheckedSet<'_>>>)> = Vec::new();
    for entry in &installed.entries {
        let Some(path) = kadmit_path(&options.client, &entry.client_config) else {
            continue;
        };
        diff.kadmit_entries += 1;
        let refuse = |reason: String| NotSent {
            endpoint: entry.kind.verb(),
            rule_set: String::new(),
            rules: Vec::new(),
            requests: Vec::new(),
            reason: format!("entry {}/{}: {reason}", entry.configuration, entry.name),
        };
        let (verb, segment) = match path.trim_start_matches('/').split_once('/') {
            Some((verb, segment)) => (verb, Some(segment)),
            None => (path.trim_start_matches('/'), None),
        };
        if verb != entry.kind.verb() {
            diff.not_sent.push(refuse(format!(
                "path {path:?} in a {} configuration, which must call /{}",
                configuration_kind(entry.kind),
                entry.kind.verb()
            )));
            continue;
        }
        let Some(segment) = segment else {
            calling.push((entry, None));
            continue;
        };
        let names = match rule_set_names(segment) {
            Ok(names) => names,
            Err(error) => {
                diff.not_sent.push(refuse(format!(
                    "path {path:?}: {error}; kadmit answers 404 and the API server applies failurePolicy {}",
                    entry.failure_policy
                )));
                continue;
            }
        };
        let mut served = Vec::new();
        for name in names {
            match sets.iter().find(|set| set.name() == name) {
                Some(set) => served.push(set),
                None => diff.not_sent.push(refuse(format!(
                    "path {path:?} names rule set {name:?}, which the rules do not have; kadmit answers 404 and the API server applies failurePolicy {}",
                    entry.failure_policy
                ))),
            }
        }
        calling.push((entry, Some(served)));
    }

    for kind in [Kind::Mutating, Kind::Validating] {
        for set in &sets {
            let wanted_namespaces = context
                .namespace_selector(&[set])
                .map(|selector| label_selector(&selector))?;
            let wanted_policy = match set.failure_policy() {
                FailurePolicy::Fail => "Fail",
                FailurePolicy::Ignore => "Ignore",
            };
            // With their match conditions the set lacks, looked up once.
            let entries: Vec<(&InstalledEntry, Option<String>)> = calling
                .iter()
                .filter(|(entry, served)| {
                    entry.kind == kind
                        && served.as_ref().is_none_or(|served| {
                            served.iter().any(|other| other.name() == set.name())
                        })
                })
                .map(|(entry, _)| (*entry, foreign_conditions(entry, set)))
                .collect();
            for rule in set.serving(kind) {
                let wanted_objects = rule
                    .rule
                    .matcher
                    .object_selector
                    .as_ref()
                    .map(|matcher| label_selector(matcher.selector()));
                // Requests grouped by why they are not sent.
                let mut missing: Vec<(String, Vec<String>)> = Vec::new();
                for atom in &rule.atoms {
                    let covering: Vec<&(&InstalledEntry, Option<String>)> = entries
                        .iter()
                        .filter(|(entry, _)| entry.atoms.iter().any(|i| i.covers(atom)))
                        .collect();
                    let reason = match covering.as_slice() {
                        [] => Some(
                            "no installed entry that calls kadmit for this rule set sends them"
                                .to_owned(),
                        ),
                        covering => {
                            let why = |(entry, foreign): &&(&InstalledEntry, Option<String>)| {
                                not_as_needed(
                                    entry,
                                    foreign.as_deref(),
                                    &wanted_namespaces,
                                    wanted_objects.as_ref(),
                                    wanted_policy,
                                )
                            };
                            // Sent as needed when one entry sends them so;
                            // otherwise, why the first does not.
                            if covering.iter().any(|entry| why(entry).is_none()) {
                                None
                            } else {
                                covering.first().and_then(why)
                            }
                        }
                    };
                    if let Some(reason) = reason {
                        match missing.iter_mut().find(|(r, _)| *r == reason) {
                            Some((_, requests)) => requests.push(describe(atom)),
                            None => missing.push((reason, vec![describe(atom)])),
                        }
                    }
                }
                for (reason, requests) in missing {
                    // Rules of one set that miss the same requests for the
                    // same reason are one finding.
                    let same = diff.not_sent.iter_mut().find(|item| {
                        item.endpoint == kind.verb()
                            && item.rule_set == set.name()
                            && item.requests == requests
                            && item.reason == reason
                    });
                    match same {
                        Some(item) => item.rules.push(rule.rule.name.to_string()),
                        None => diff.not_sent.push(NotSent {
                            endpoint: kind.verb(),
                            rule_set: set.name().to_owned(),
                            rules: vec![rule.rule.name.to_string()],
                            requests,
                            reason,
                        }),
                    }
                }
            }
        }
    }

    for (entry, served) in &calling {
        let whom = match served {
            None => String::new(),
            Some(served) if served.is_empty() => " of the rule sets its path names".to_owned(),
            Some(served) => {
                let names: Vec<&str> = served.iter().map(|set| set.name()).collect();
                format!(" of {}", names.join(", "))
            }
        };
        let served: Vec<&CheckedSet<'_>> = match served {
            Some(served) => served.clone(),
            None => sets.iter().collect(),
        };
        let needed: Vec<&Atom> = served
            .iter()
            .flat_map(|set| set.serving(entry.kind))
            .flat_map(|rule| rule.atoms.iter())
            .collect();
        let mut unused = Vec::new();
        let mut wider = Vec::new();
        for atom in &entry.atoms {
            if needed.iter().any(|rule| rule.covers(atom)) {
                continue;
            }
            if needed.iter().any(|rule| overlaps(rule, atom)) {
                wider.push(describe(atom));
            } else {
                unused.push(describe(atom));
            }
        }
        let name = format!("{}/{}", entry.configuration, entry.name);
        let verb = entry.kind.verb();
        if !unused.is_empty() {
            diff.needless.push(Needless {
                entry: name.clone(),
                requests: unused,
                reason: format!("no {verb} rule{whom} matches them"),
            });
        }
        if !wider.is_empty() {
            diff.needless.push(Needless {
                entry: name,
                requests: wider,
                reason: format!("a {verb} rule{whom} matches only part of them"),
            });
        }
    }
    Ok(diff)
}

/// An entry's `matchConditions` as (name, expression).
fn conditions(
    list: Option<Vec<k8s_openapi::api::admissionregistration::v1::MatchCondition>>,
) -> Vec<(String, String)> {
    list.into_iter()
        .flatten()
        .map(|condition| (condition.name, condition.expression))
        .collect()
}

/// An entry's `matchPolicy`, `Equivalent` (the API's default) when absent.
fn match_policy(policy: Option<String>) -> String {
    policy.unwrap_or_else(|| "Equivalent".to_owned())
}

/// The names of `entry`'s `matchConditions` that `set` does not have (by
/// expression), as a list to show; `None` when it has them all. The rule
/// set's own conditions send what its rules need (kadmit checks them
/// too); any other may hold back requests the rules match.
fn foreign_conditions(entry: &InstalledEntry, set: &CheckedSet<'_>) -> Option<String> {
    if entry.match_conditions.is_empty() {
        return None;
    }
    let own: HashSet<&str> = set
        .info
        .match_conditions
        .iter()
        .map(|condition| condition.expression.as_str())
        .collect();
    let foreign: Vec<&str> = entry
        .match_conditions
        .iter()
        .filter(|(_, expression)| !own.contains(expression.as_str()))
        .map(|(name, _)| name.as_str())
        .collect();
    if foreign.is_empty() {
        return None;
    }
    const SHOWN: usize = 5;
    let mut names = foreign
        .iter()
        .take(SHOWN)
        .map(|name| format!("{:?}", crate::excerpt::cut(name, 80)))
        .collect::<Vec<_>>()
        .join(", ");
    if foreign.len() > SHOWN {
        names.push_str(&format!(" and {} more", foreign.len() - SHOWN));
    }
    Some(names)
}

/// Why `entry`, which sends a request a rule matches, may still not send
/// it as the rule needs: each of its selectors, match conditions
/// (`foreign`, from [`foreign_conditions`]), match policy, reinvocation
/// policy and failure policy that differs from what the rule set asks
/// for; `None` when none does.
fn not_as_needed(
    entry: &InstalledEntry,
    foreign: Option<&str>,
    wanted_namespaces: &meta::LabelSelector,
    wanted_objects: Option<&meta::LabelSelector>,
    wanted_policy: &str,
) -> Option<String> {
    let at = || format!("entry {}/{}", entry.configuration, entry.name);
    let mut problems = Vec::new();
    if !no_narrower(entry.namespace_selector.as_ref(), Some(wanted_namespaces)) {
        problems.push(format!(
            "{} has a namespaceSelector narrower than the rule set's ({})",
            at(),
            extra_requirements(entry.namespace_selector.as_ref(), Some(wanted_namespaces))
        ));
    }
    if !no_narrower(entry.object_selector.as_ref(), wanted_objects) {
        problems.push(format!(
            "{} has an objectSelector narrower than the rule's ({})",
            at(),
            extra_requirements(entry.object_selector.as_ref(), wanted_objects)
        ));
    }
    if let Some(names) = foreign {
        problems.push(format!(
            "{} has matchConditions the rule set does not have ({names}), so the API server \
             may not send them; give the rule set these conditions, or remove them from the \
             entry",
            at()
        ));
    }
    if entry.match_policy != "Equivalent" {
        problems.push(format!(
            "{} has matchPolicy {}, so the same requests made through another API group or \
             version of the resource are not sent; the generated entries use Equivalent",
            at(),
            entry.match_policy
        ));
    }
    if let Some(policy) = entry.reinvocation_policy.as_deref()
        && policy != "IfNeeded"
    {
        problems.push(format!(
            "{} has reinvocationPolicy {policy}, so what later webhooks and policies add to \
             these objects is not sent back to kadmit, and the rules' edits do not reach it; the \
             generated entries use IfNeeded",
            at()
        ));
    }
    if entry.failure_policy != "Fail" && wanted_policy != "Ignore" {
        problems.push(format!(
            "{} has failurePolicy {}, so they are admitted unchecked whenever kadmit cannot \
             answer; the rule set asks for {wanted_policy}",
            at(),
            entry.failure_policy
        ));
    }
    // All of them: fixing one would otherwise reveal the next.
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The path an entry calls kadmit at, or `None` when it calls something else.
fn kadmit_path(client: &Client, config: &WebhookClientConfig) -> Option<String> {
    match (client, &config.service, &config.url) {
        (Client::Service(wanted), Some(service), _) => {
            let port = service.port.unwrap_or(443);
            let wanted_port = wanted.port.map_or(443, i32::from);
            (service.namespace == wanted.namespace
                && service.name == wanted.name
                && port == wanted_port)
                .then(|| service.path.clone().unwrap_or_else(|| "/".to_owned()))
        }
        (Client::Url(wanted), _, Some(url)) => url
            .strip_prefix(wanted.as_str())
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .map(|rest| {
                if rest.is_empty() {
                    "/".to_owned()
                } else {
                    rest.to_owned()
                }
            }),
        _ => None,
    }
}

fn configuration_kind(kind: Kind) -> &'static str {
    match kind {
        Kind::Mutating => "MutatingWebhookConfiguration",
        Kind::Validating => "ValidatingWebhookConfiguration",
    }
}

/// Every combination an installed entry's rules send, or `None` past
/// `limit`. Values the API would not accept (an unknown operation or
/// scope) send nothing.
fn installed_atoms(rules: &[RuleWithOperations], limit: usize) -> Option<Vec<Atom>> {
    let mut atoms = Vec::new();
    for rule in rules {
        let scope = match rule.scope.as_deref() {
            None | Some("*") => ALL_SCOPES,
            Some("Cluster") => rank(&SCOPES, &Scope::Cluster),
            Some("Namespaced") => rank(&SCOPES, &Scope::Namespaced),
            Some(_) => continue,
        };
        for operation in rule.operations.iter().flatten() {
            let operation = match operation.as_str() {
                "CREATE" => OperationPattern::Create,
                "UPDATE" => OperationPattern::Update,
                "DELETE" => OperationPattern::Delete,
                "CONNECT" => OperationPattern::Connect,
                "*" => OperationPattern::All,
                _ => continue,
            };
            for group in rule.api_groups.iter().flatten() {
                for version in rule.api_versions.iter().flatten() {
                    for resource in rule.resources.iter().flatten() {
                        if atoms.len() >= limit {
                            return None;
                        }
                        atoms.push(Atom {
                            operation: rank(&OPERATIONS, &operation),
                            group: group.clone(),
                            version: version.clone(),
                            resource: resource.clone(),
                            scope,
                        });
                    }
                }
            }
        }
    }
    Some(atoms)
}

/// Whether some request matches both.
fn overlaps(a: &Atom, b: &Atom) -> bool {
    let (resource_a, sub_a) = super::split_resource(&a.resource);
    let (resource_b, sub_b) = super::split_resource(&b.resource);
    let same = |x: &str, y: &str| x == "*" || y == "*" || x == y;
    (a.operation == b.operation || a.operation == ALL_OPERATIONS || b.operation == ALL_OPERATIONS)
        && same(&a.group, &b.group)
        && same(&a.version, &b.version)
        && same(resource_a, resource_b)
        && same(sub_a, sub_b)
        && (a.scope == b.scope || a.scope == ALL_SCOPES || b.scope == ALL_SCOPES)
}

/// `CREATE pods`, `UPDATE deployments.apps`, with the version and scope
/// when they are not `*`.
fn describe(atom: &Atom) -> String {
    let operation = OPERATIONS
        .get(usize::from(atom.operation))
        .map_or("?", |operation| super::operation_name(*operation));
    let (resource, sub) = super::split_resource(&atom.resource);
    let mut text = format!("{operation} {resource}");
    if !atom.group.is_empty() {
        text.push('.');
        text.push_str(&atom.group);
    }
    if !sub.is_empty() {
        text.push('/');
        text.push_str(sub);
    }
    if atom.version != "*" {
        text.push_str(&format!(" (version {})", atom.version));
    }
    if atom.scope != ALL_SCOPES {
        let scope = SCOPES
            .get(usize::from(atom.scope))
            .map_or("?", |scope| super::scope_name(*scope));
        text.push_str(&format!(" ({scope} only)"));
    }
    text
}

/// One requirement of a label selector, `matchLabels` entries written as
/// `In` with one value, values sorted.
type Requirement = (String, String, Vec<String>);

fn requirements(selector: Option<&meta::LabelSelector>) -> BTreeSet<Requirement> {
    let mut out = BTreeSet::new();
    let Some(selector) = selector else {
        return out;
    };
    for (key, value) in selector.match_labels.iter().flatten() {
        out.insert((key.clone(), "In".to_owned(), vec![value.clone()]));
    }
    for requirement in selector.match_expressions.iter().flatten() {
        let mut values = requirement.values.clone().unwrap_or_default();
        values.sort();
        values.dedup();
        out.insert((
            requirement.key.clone(),
            requirement.operator.clone(),
            values,
        ));
    }
    out
}

/// Whether the installed selector surely selects everything the wanted one
/// does: each of its requirements is one of the wanted selector's. (A
/// selector with other requirements might still select as much; it is
/// reported, since kadmit cannot tell.)
fn no_narrower(
    installed: Option<&meta::LabelSelector>,
    wanted: Option<&meta::LabelSelector>,
) -> bool {
    requirements(installed).is_subset(&requirements(wanted))
}

/// The installed selector's requirements the wanted one lacks, as
/// `key NotIn [a, b]`.
fn extra_requirements(
    installed: Option<&meta::LabelSelector>,
    wanted: Option<&meta::LabelSelector>,
) -> String {
    let wanted = requirements(wanted);
    requirements(installed)
        .difference(&wanted)
        .map(|(key, operator, values)| {
            if values.is_empty() {
                format!("{key} {operator}")
            } else {
                format!("{key} {operator} [{}]", values.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kadmit_entries == 0 {
            writeln!(f, "no installed webhook entry calls kadmit")?;
        }
        if !self.not_sent.is_empty() {
            writeln!(
                f,
                "not sent to kadmit: rules that look active and enforce nothing for these requests"
            )?;
            for item in &self.not_sent {
                if item.rules.is_empty() {
                    writeln!(f, "  {}: {}", item.endpoint, item.reason)?;
                } else {
                    let rules = if item.rules.len() == 1 {
                        "rule"
                    } else {
                        "rules"
                    };
                    writeln!(
                        f,
                        "  {} {} {} ({}): {}: {}",
                        item.rule_set,
                        rules,
                        item.rules.join(", "),
                        item.endpoint,
                        item.requests.join(", "),
                        item.reason
                    )?;
                }
            }
        }
        if !self.needless.is_empty() {
            writeln!(f, "sent needlessly: calls that cost latency for nothing")?;
            for item in &self.needless {
                writeln!(
                    f,
                    "  {}: {}: {}",
                    item.entry,
                    item.requests.join(", "),
                    item.reason
                )?;
            }
        }
        if self.not_sent.is_empty() && self.needless.is_empty() && self.kadmit_entries > 0 {
            writeln!(
                f,
                "no differences: the installed configuration sends kadmit every request its rules match, and nothing else"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atom(operation: OperationPattern, group: &str, resource: &str) -> Atom {
        Atom {
            operation: rank(&OPERATIONS, &operation),
            group: group.to_owned(),
            version: "*".to_owned(),
            resource: resource.to_owned(),
            scope: ALL_SCOPES,
        }
    }

    #[test]
    fn kubectl_json_is_read_past_what_the_yaml_parser_reads_ahead() {
        // `kubectl get validatingwebhookconfigurations -o json`: one List,
        // one flow collection that the YAML parser would read whole; 3,000
        // configurations hold over 32,768 indicators.
        let configuration = |i: usize| {
            serde_json::json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": format!("c{i}")},
                "webhooks": [{
                    "name": format!("c{i}.example.com"),
                    "clientConfig": {"url": "https://example.com/validate"},
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }],
            })
        };
        let list = serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": (0..3_000).map(configuration).collect::<Vec<_>>(),
        });
        let installed = read_installed("installed.json", &list.to_string()).expect("read");
        assert_eq!(installed.entries.len(), 3_000);
        // The same as YAML with the List in flow style is over the bound.
        let flow = format!("[{}]\n", vec!["{a: 1}"; 12_000].join(", "));
        let error = read_installed("installed.yaml", &flow).expect_err("over the bound");
        assert!(
            error
                .to_string()
                .contains("holds more than 32768 indicators"),
            "{error}"
        );
    }

    #[test]
    fn overlapping_requests() {
        use OperationPattern::{All, Create, Update};
        let cases = [
            (atom(Create, "", "pods"), atom(Create, "", "pods"), true),
            (atom(Create, "", "pods"), atom(Update, "", "pods"), false),
            (atom(All, "", "pods"), atom(Update, "", "pods"), true),
            (
                atom(Create, "*", "*"),
                atom(Create, "apps", "deployments"),
                true,
            ),
            (
                atom(Create, "", "*"),
                atom(Create, "", "pods/status"),
                false,
            ),
            (
                atom(Create, "", "*/*"),
                atom(Create, "", "pods/status"),
                true,
            ),
            (
                atom(Create, "apps", "pods"),
                atom(Create, "", "pods"),
                false,
            ),
        ];
        for (a, b, expected) in cases {
            assert_eq!(overlaps(&a, &b), expected, "{a:?} {b:?}");
            assert_eq!(overlaps(&b, &a), expected, "{b:?} {a:?}");
        }
    }

    #[test]
    fn a_selector_is_no_narrower_when_it_asks_nothing_more() {
        let selector = |labels: &[(&str, &str)], excluded: &[&str]| meta::LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(excluded.iter().map(|v| (*v).to_owned()).collect()),
            }]),
        };
        let wanted = selector(&[("team", "a")], &["kube-system", "kadmit"]);
        // The same, written in another order.
        assert!(no_narrower(
            Some(&selector(&[("team", "a")], &["kadmit", "kube-system"])),
            Some(&wanted)
        ));
        // Fewer requirements, or none: wider.
        assert!(no_narrower(None, Some(&wanted)));
        assert!(no_narrower(
            Some(&meta::LabelSelector::default()),
            Some(&wanted)
        ));
        // One more excluded namespace, or one more label: narrower.
        let narrower = selector(&[("team", "a")], &["kadmit", "kube-system", "x"]);
        assert!(!no_narrower(Some(&narrower), Some(&wanted)));
        assert_eq!(
            extra_requirements(Some(&narrower), Some(&wanted)),
            "kubernetes.io/metadata.name NotIn [kadmit, kube-system, x]"
        );
        let labelled = selector(
            &[("team", "a"), ("tier", "web")],
            &["kube-system", "kadmit"],
        );
        assert!(!no_narrower(Some(&labelled), Some(&wanted)));
    }

    #[test]
    fn kadmit_paths_of_services_and_urls() {
        let service = Client::Service("kadmit/kadmit".parse().unwrap());
        let config = |namespace: &str, port: Option<i32>, path: Option<&str>| WebhookClientConfig {
            service: Some(
                k8s_openapi::api::admissionregistration::v1::ServiceReference {
                    namespace: namespace.to_owned(),
                    name: "kadmit".to_owned(),
                    path: path.map(str::to_owned),
                    port,
                },
            ),
            ..WebhookClientConfig::default()
        };
        let path = |config| kadmit_path(&service, &config);
        assert_eq!(
            path(config("kadmit", None, Some("/validate/a"))).as_deref(),
            Some("/validate/a")
        );
        assert_eq!(
            path(config("kadmit", Some(443), Some("/validate"))).as_deref(),
            Some("/validate")
        );
        assert_eq!(path(config("kadmit", Some(8443), Some("/validate"))), None);
        assert_eq!(path(config("other", None, Some("/validate"))), None);
        assert_eq!(path(config("kadmit", None, None)).as_deref(), Some("/"));

        let url = Client::Url("https://kadmit.example:8443".parse().unwrap());
        let at = |text: &str| {
            kadmit_path(
                &url,
                &WebhookClientConfig {
                    url: Some(text.to_owned()),
                    ..WebhookClientConfig::default()
                },
            )
        };
        assert_eq!(
            at("https://kadmit.example:8443/mutate/a.b").as_deref(),
            Some("/mutate/a.b")
        );
        assert_eq!(at("https://kadmit.example:84430/mutate"), None);
        assert_eq!(at("https://elsewhere.example/mutate"), None);
    }
}
