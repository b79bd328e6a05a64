//! Resource patterns normalized to the webhook API's form, the one both the
//! matcher and the generated webhook configurations use.
//!
//! The short form follows kubectl's `resource.group` notation. A bare name
//! (`deployments`) is resolved through the table of built-in Kubernetes
//! resources, so `deployments` means `deployments.apps`; an unknown bare name is
//! an error rather than a rule that silently never matches.

use super::{ApiRule, ResourcePattern, Scope};
use crate::review::Operation;

/// A resource pattern in the webhook API's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRule {
    /// API groups; `""` is core, `*` all.
    pub api_groups: Vec<String>,
    /// API versions; `*` all.
    pub api_versions: Vec<String>,
    /// `resource` or `resource/subresource`, with `*` allowed on either side.
    pub resources: Vec<String>,
    /// Scope.
    pub scope: Scope,
}

/// Why a resource pattern is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceError {
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

/// Built-in resources: name, API group (for bare names in the short form),
/// and whether the resource is cluster-scoped.
///
/// Every resource the API server of Kubernetes 1.34 serves, as
/// `kubectl api-resources` lists them (alpha and beta APIs included), less
/// the read-only review resources nothing admits. Where a name is in two
/// groups (`events`), the first is what a bare name means. A resource this
/// table does not know yet can still be matched with the full form
/// (`{apiGroups: [...], resources: [...]}`), which is not checked against it.
const BUILT_IN: &[(&str, &str, bool)] = &[
    ("bindings", "", false),
    ("componentstatuses", "", true),
    ("configmaps", "", false),
    ("endpoints", "", false),
    ("events", "", false),
    ("limitranges", "", false),
    ("namespaces", "", true),
    ("nodes", "", true),
    ("persistentvolumeclaims", "", false),
    ("persistentvolumes", "", true),
    ("pods", "", false),
    ("podtemplates", "", false),
    ("replicationcontrollers", "", false),
    ("resourcequotas", "", false),
    ("secrets", "", false),
    ("serviceaccounts", "", false),
    ("services", "", false),
    ("controllerrevisions", "apps", false),
    ("daemonsets", "apps", false),
    ("deployments", "apps", false),
    ("replicasets", "apps", false),
    ("statefulsets", "apps", false),
    ("cronjobs", "batch", false),
    ("jobs", "batch", false),
    ("horizontalpodautoscalers", "autoscaling", false),
    ("ingressclasses", "networking.k8s.io", true),
    ("ingresses", "networking.k8s.io", false),
    ("ipaddresses", "networking.k8s.io", true),
    ("networkpolicies", "networking.k8s.io", false),
    ("servicecidrs", "networking.k8s.io", true),
    ("poddisruptionbudgets", "policy", false),
    ("clusterrolebindings", "rbac.authorization.k8s.io", true),
    ("clusterroles", "rbac.authorization.k8s.io", true),
    ("rolebindings", "rbac.authorization.k8s.io", false),
    ("roles", "rbac.authorization.k8s.io", false),
    ("csidrivers", "storage.k8s.io", true),
    ("csinodes", "storage.k8s.io", true),
    ("csistoragecapacities", "storage.k8s.io", false),
    ("storageclasses", "storage.k8s.io", true),
    ("volumeattachments", "storage.k8s.io", true),
    ("volumeattributesclasses", "storage.k8s.io", true),
    (
        "mutatingadmissionpolicies",
        "admissionregistration.k8s.io",
        true,
    ),
    (
        "mutatingadmissionpolicybindings",
        "admissionregistration.k8s.io",
        true,
    ),
    (
        "mutatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        true,
    ),
    (
        "validatingadmissionpolicies",
        "admissionregistration.k8s.io",
        true,
    ),
    (
        "validatingadmissionpolicybindings",
        "admissionregistration.k8s.io",
        true,
    ),
    (
        "validatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        true,
    ),
    ("customresourcedefinitions", "apiextensions.k8s.io", true),
    ("apiservices", "apiregistration.k8s.io", true),
    ("selfsubjectreviews", "authentication.k8s.io", true),
    ("tokenreviews", "authentication.k8s.io", true),
    ("localsubjectaccessreviews", "authorization.k8s.io", false),
    ("selfsubjectaccessreviews", "authorization.k8s.io", true),
    ("selfsubjectrulesreviews", "authorization.k8s.io", true),
    ("subjectaccessreviews", "authorization.k8s.io", true),
    ("priorityclasses", "scheduling.k8s.io", true),
    ("leases", "coordination.k8s.io", false),
    ("leasecandidates", "coordination.k8s.io", false),
    ("endpointslices", "discovery.k8s.io", false),
    ("events", "events.k8s.io", false),
    ("flowschemas", "flowcontrol.apiserver.k8s.io", true),
    (
        "prioritylevelconfigurations",
        "flowcontrol.apiserver.k8s.io",
        true,
    ),
    ("storageversions", "internal.apiserver.k8s.io", true),
    ("certificatesigningrequests", "certificates.k8s.io", true),
    ("clustertrustbundles", "certificates.k8s.io", true),
    ("podcertificaterequests", "certificates.k8s.io", false),
    ("runtimeclasses", "node.k8s.io", true),
    ("deviceclasses", "resource.k8s.io", true),
    ("devicetaintrules", "resource.k8s.io", true),
    ("resourceclaims", "resource.k8s.io", false),
    ("resourceclaimtemplates", "resource.k8s.io", false),
    ("resourceslices", "resource.k8s.io", true),
    ("storageversionmigrations", "storagemigration.k8s.io", true),
];

/// The subresources of built-in resources (resource, group, subresources),
/// as the API server of Kubernetes 1.34 serves them; a built-in resource
/// not listed has none. A webhook rule naming any other subresource of a
/// built-in resource never matches, so the short form refuses it; a
/// subresource of a newer Kubernetes can be named in the full form, which
/// is not checked against this table.
const BUILT_IN_SUBRESOURCES: &[(&str, &str, &[&str])] = &[
    (
        "pods",
        "",
        &[
            "attach",
            "binding",
            "ephemeralcontainers",
            "eviction",
            "exec",
            "log",
            "portforward",
            "proxy",
            "resize",
            "status",
        ],
    ),
    ("namespaces", "", &["finalize", "status"]),
    ("nodes", "", &["proxy", "status"]),
    ("persistentvolumeclaims", "", &["status"]),
    ("persistentvolumes", "", &["status"]),
    ("replicationcontrollers", "", &["scale", "status"]),
    ("resourcequotas", "", &["status"]),
    ("serviceaccounts", "", &["token"]),
    ("services", "", &["proxy", "status"]),
    ("daemonsets", "apps", &["status"]),
    ("deployments", "apps", &["scale", "status"]),
    ("replicasets", "apps", &["scale", "status"]),
    ("statefulsets", "apps", &["scale", "status"]),
    ("cronjobs", "batch", &["status"]),
    ("jobs", "batch", &["status"]),
    ("horizontalpodautoscalers", "autoscaling", &["status"]),
    ("ingresses", "networking.k8s.io", &["status"]),
    ("networkpolicies", "networking.k8s.io", &["status"]),
    ("servicecidrs", "networking.k8s.io", &["status"]),
    ("poddisruptionbudgets", "policy", &["status"]),
    (
        "mutatingadmissionpolicies",
        "admissionregistration.k8s.io",
        &["status"],
    ),
    (
        "validatingadmissionpolicies",
        "admissionregistration.k8s.io",
        &["status"],
    ),
    (
        "customresourcedefinitions",
        "apiextensions.k8s.io",
        &["status"],
    ),
    ("apiservices", "apiregistration.k8s.io", &["status"]),
    ("flowschemas", "flowcontrol.apiserver.k8s.io", &["status"]),
    (
        "prioritylevelconfigurations",
        "flowcontrol.apiserver.k8s.io",
        &["status"],
    ),
    ("storageversions", "internal.apiserver.k8s.io", &["status"]),
    (
        "certificatesigningrequests",
        "certificates.k8s.io",
        &["approval", "status"],
    ),
    ("podcertificaterequests", "certificates.k8s.io", &["status"]),
    ("volumeattachments", "storage.k8s.io", &["status"]),
    ("devicetaintrules", "resource.k8s.io", &["status"]),
    ("resourceclaims", "resource.k8s.io", &["status"]),
    (
        "storageversionmigrations",
        "storagemigration.k8s.io",
        &["status"],
    ),
];

/// The API groups the API server of Kubernetes 1.34 serves itself (the
/// groups of [`BUILT_IN`], core `""` included). A group with a dot that is
/// not here is a custom resource's or an aggregated API's (`cert-manager.io`,
/// `metrics.k8s.io`); one without a dot is a mistake, because the API server
/// refuses CustomResourceDefinitions whose group has no dot.
fn is_built_in_group(group: &str) -> bool {
    BUILT_IN.iter().any(|(_, g, _)| *g == group)
}

/// The resources of a built-in group, for hints.
fn resources_of(group: &str) -> Vec<&'static str> {
    BUILT_IN
        .iter()
        .filter(|(_, g, _)| *g == group)
        .map(|(name, ..)| *name)
        .collect()
}

/// The dot-less built-in groups, for hints.
fn dotless_groups() -> Vec<&'static str> {
    let mut groups: Vec<&str> = BUILT_IN
        .iter()
        .map(|(_, g, _)| *g)
        .filter(|g| !g.is_empty() && !g.contains('.'))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// The API group of a built-in resource.
pub fn built_in_group(resource: &str) -> Option<&'static str> {
    BUILT_IN
        .iter()
        .find(|(name, ..)| *name == resource)
        .map(|(_, group, _)| *group)
}

/// True for built-in cluster-scoped resources (Namespaces, Nodes, ...).
pub fn built_in_cluster_scoped(resource: &str) -> bool {
    BUILT_IN
        .iter()
        .any(|(name, _, cluster)| *cluster && *name == resource)
}

impl ResourcePattern {
    /// This pattern in the webhook API's form.
    pub fn normalize(&self) -> Result<ResourceRule, ResourceError> {
        match self {
            ResourcePattern::Short(text) => normalize_short(text),
            ResourcePattern::Full(rule) => normalize_full(rule),
        }
    }
}

fn normalize_short(text: &str) -> Result<ResourceRule, ResourceError> {
    let (resource_part, sub) = match text.split_once('/') {
        Some((resource, sub)) => (resource, Some(sub)),
        None => (text, None),
    };
    if !resource_part.is_empty() && is_built_in_group(resource_part) {
        return Err(group_first(text, resource_part, sub));
    }
    if let Some(sub) = sub {
        check_name(sub, text)?;
    }
    let (resource, group) = if resource_part == "*" {
        ("*", "*".to_owned())
    } else if let Some((resource, group)) = resource_part.split_once('.') {
        check_name(resource, text)?;
        check_group(group, text)?;
        check_known(text, resource, group, sub)?;
        (resource, group.to_owned())
    } else {
        check_name(resource_part, text)?;
        match built_in_group(resource_part) {
            Some(group) => (resource_part, group.to_owned()),
            None => {
                return Err(ResourceError {
                    message: format!("unknown resource {text:?}"),
                    hint: Some(format!(
                        "use the plural name of a built-in resource (pods, deployments, ...), or name the group of a custom resource as {resource_part}.example.com"
                    )),
                });
            }
        }
    };
    if let Some(sub) = sub {
        check_subresource(text, resource, &group, sub)?;
    }
    let resource = match sub {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_owned(),
    };
    Ok(ResourceRule {
        api_groups: vec![group],
        api_versions: vec!["*".to_owned()],
        resources: vec![resource],
        scope: Scope::All,
    })
}

fn normalize_full(rule: &ApiRule) -> Result<ResourceRule, ResourceError> {
    for (field, list) in [
        ("apiGroups", &rule.api_groups),
        ("apiVersions", &rule.api_versions),
        ("resources", &rule.resources),
    ] {
        if list.is_empty() {
            return Err(ResourceError {
                message: format!("{field} is empty"),
                hint: Some(format!("list at least one value, or \"*\" for all {field}")),
            });
        }
    }
    for group in &rule.api_groups {
        if group != "*" && !group.is_empty() {
            check_group(group, group)?;
            if !group.contains('.') && !is_built_in_group(group) {
                return Err(unknown_dotless_group(group, None));
            }
        }
    }
    for version in &rule.api_versions {
        check_version(version)?;
    }
    for resource in &rule.resources {
        let (name, sub) = match resource.split_once('/') {
            Some((name, sub)) => (name, Some(sub)),
            None => (resource.as_str(), None),
        };
        check_name(name, resource)?;
        if let Some(sub) = sub {
            check_name(sub, resource)?;
        }
    }
    if let Some(scope) = rule.scope {
        check_scope(rule, scope)?;
    }
    Ok(ResourceRule {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.unwrap_or(Scope::All),
    })
}

/// `apps/deployments`, `networking.k8s.io/ingresses`, `apps/v1/deployments`:
/// the API's URL order, which the short form reads as resource `apps` (or
/// `networking` in group `k8s.io`) and never matches.
fn group_first(text: &str, group: &str, rest: Option<&str>) -> ResourceError {
    let resource = rest
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|resource| !resource.is_empty());
    let dotted = if group.is_empty() {
        String::new()
    } else {
        format!(".{group}")
    };
    let hint = match resource {
        Some(resource) => format!("write resource.group: {resource}{dotted}"),
        None => format!(
            "write resource.group, e.g. {}{dotted}",
            resources_of(group).first().copied().unwrap_or("widgets")
        ),
    };
    ResourceError {
        message: format!(
            "{text:?} names the API group {group} where the short form expects a resource"
        ),
        hint: Some(hint),
    }
}

/// A short form `resource.group` whose group is built in must name one of
/// its resources; one whose group has no dot must name a built-in group.
fn check_known(
    text: &str,
    resource: &str,
    group: &str,
    sub: Option<&str>,
) -> Result<(), ResourceError> {
    if is_built_in_group(group) {
        if resource == "*" || resources_of(group).contains(&resource) {
            return Ok(());
        }
        let hint = match sub {
            // `gateway.networking.k8s.io/httproutes`: a custom group under a
            // built-in one, written group first.
            Some(sub) if !sub.contains('/') => {
                format!("write resource.group: {sub}.{resource}.{group}")
            }
            _ => format!(
                "the plural names in {group} are {}; a resource of a newer Kubernetes can be named in the full form {{apiGroups: [{group}], apiVersions: [\"*\"], resources: [{resource}]}}",
                resources_of(group).join(", ")
            ),
        };
        return Err(ResourceError {
            message: format!(
                "{text:?}: the built-in API group {group} has no resource {resource:?}"
            ),
            hint: Some(hint),
        });
    }
    if !group.contains('.') {
        let fix = sub
            .filter(|sub| !sub.contains('/'))
            .map(|sub| format!("{sub}.{resource}.{group}"));
        return Err(unknown_dotless_group(group, fix.as_deref()).with_subject(text, resource));
    }
    Ok(())
}

/// The operations the API server calls admission webhooks with for a
/// request on a subresource named `sub` (of built-in resources; a custom
/// resource's `status` and `scale` alike), `None` where it is not known:
/// a rule matching none of them is never called for it.
pub fn subresource_operations(sub: &str) -> Option<&'static [Operation]> {
    use Operation::{Connect, Create, Update};
    Some(match sub {
        // Reads of logs are never admitted.
        "log" => &[],
        "exec" | "attach" | "portforward" | "proxy" => &[Connect],
        "eviction" | "binding" | "token" => &[Create],
        "status" | "scale" | "ephemeralcontainers" | "resize" | "finalize" | "approval" => {
            &[Update]
        }
        _ => return None,
    })
}

/// A short form `resource/subresource` of a built-in resource must name one
/// of its subresources ([`BUILT_IN_SUBRESOURCES`]): `pods/stauts` would
/// otherwise be a rule that never matches.
fn check_subresource(
    text: &str,
    resource: &str,
    group: &str,
    sub: &str,
) -> Result<(), ResourceError> {
    let built_in = BUILT_IN
        .iter()
        .any(|(name, g, _)| *name == resource && *g == group);
    if !built_in || sub == "*" {
        return Ok(());
    }
    let known: &[&str] = BUILT_IN_SUBRESOURCES
        .iter()
        .find(|(name, g, _)| *name == resource && *g == group)
        .map_or(&[], |(.., subs)| *subs);
    if known.contains(&sub) {
        return Ok(());
    }
    let full_form = format!(
        "a subresource of a newer Kubernetes can be named in the full form {{apiGroups: [\"{group}\"], apiVersions: [\"*\"], resources: [{resource}/{sub}]}}"
    );
    let hint = match crate::plan::fields::nearest(sub, known.iter().copied()) {
        Some(near) => format!("did you mean {resource}/{near}?"),
        None if known.is_empty() => format!("{resource} has no subresources; {full_form}"),
        None => format!(
            "the subresources of {resource} are {}; {full_form}",
            known.join(", ")
        ),
    };
    Err(ResourceError {
        message: format!("{text:?}: the built-in resource {resource} has no subresource {sub:?}"),
        hint: Some(hint),
    })
}

fn unknown_dotless_group(group: &str, fix: Option<&str>) -> ResourceError {
    let hint = match fix {
        Some(fix) => format!("write resource.group: {fix}"),
        None => format!(
            "the built-in groups without a dot are {}; a custom resource's group has one, e.g. widgets.example.com",
            dotless_groups().join(", ")
        ),
    };
    ResourceError {
        message: format!("unknown API group {group:?}"),
        hint: Some(hint),
    }
}

impl ResourceError {
    /// Names the pattern, and the right group when the resource is built in
    /// (`deployments.app` is `deployments.apps`).
    fn with_subject(mut self, text: &str, resource: &str) -> ResourceError {
        self.message = format!("{text:?}: {}", self.message);
        if let Some(group) = built_in_group(resource) {
            let dotted = if group.is_empty() {
                String::new()
            } else {
                format!(".{group}")
            };
            self.hint = Some(format!(
                "{resource} is in the group {group:?}: write {resource}{dotted}"
            ));
        }
        self
    }
}

/// An API version is `*` or a lowercase DNS label (`v1`, `v1beta1`, a
/// custom resource's `v2alpha3`): the API server compares versions exactly,
/// so `V1` would never match.
fn check_version(version: &str) -> Result<(), ResourceError> {
    let valid = version == "*"
        || (version.starts_with(|c: char| c.is_ascii_lowercase())
            && version
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    if valid {
        Ok(())
    } else {
        Err(ResourceError {
            message: format!("invalid API version {version:?}: versions are lowercase"),
            hint: Some(format!(
                "write {}, or \"*\" for all versions",
                version.to_ascii_lowercase()
            )),
        })
    }
}

/// A `scope` that no resource of the rule can have (`Cluster` for pods,
/// `Namespaced` for nodes) would make the rule never match. Only what
/// [`BUILT_IN`] knows is judged: a rule naming any resource it does not
/// know, or any group or resource `*`, passes.
fn check_scope(rule: &ApiRule, scope: Scope) -> Result<(), ResourceError> {
    let wanted_cluster = match scope {
        Scope::Cluster => true,
        Scope::Namespaced => false,
        Scope::All => return Ok(()),
    };
    let mut judged = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            let name = resource
                .split_once('/')
                .map_or(resource.as_str(), |(name, _)| name);
            let known = BUILT_IN
                .iter()
                .find(|(n, g, _)| *n == name && *g == group.as_str());
            match known {
                Some((_, _, cluster)) if *cluster != wanted_cluster => judged.push(name),
                // Unknown, `*`, or of the wanted scope: the rule can match.
                _ => return Ok(()),
            }
        }
    }
    let (is, other) = if wanted_cluster {
        ("namespaced", "Namespaced")
    } else {
        ("cluster-scoped", "Cluster")
    };
    judged.dedup();
    Err(ResourceError {
        message: format!(
            "scope {scope:?} never matches: {} {} {is}",
            judged.join(", "),
            if judged.len() == 1 { "is" } else { "are" }
        ),
        hint: Some(format!("write scope: {other}, or leave scope out")),
    })
}

fn check_name(name: &str, whole: &str) -> Result<(), ResourceError> {
    let valid = name == "*"
        || (!name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    if valid {
        Ok(())
    } else {
        Err(ResourceError {
            message: format!(
                "invalid resource {whole:?}: {name:?} is not a lowercase resource name"
            ),
            hint: Some(
                "write resource[.group][/subresource], e.g. pods, deployments.apps/scale, */scale"
                    .to_owned(),
            ),
        })
    }
}

fn check_group(group: &str, whole: &str) -> Result<(), ResourceError> {
    let valid = group == "*"
        || (!group.is_empty()
            && group.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            }));
    if valid {
        Ok(())
    } else {
        Err(ResourceError {
            message: format!("invalid API group in {whole:?}"),
            hint: Some("an API group is a DNS name such as apps or example.com".to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(text: &str) -> Result<(Vec<String>, Vec<String>), ResourceError> {
        ResourcePattern::Short(text.to_owned())
            .normalize()
            .map(|rule| (rule.api_groups, rule.resources))
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn short_forms() {
        assert_eq!(short("pods").unwrap(), (strings(&[""]), strings(&["pods"])));
        assert_eq!(
            short("pods/status").unwrap(),
            (strings(&[""]), strings(&["pods/status"]))
        );
        assert_eq!(
            short("deployments").unwrap(),
            (strings(&["apps"]), strings(&["deployments"]))
        );
        assert_eq!(
            short("deployments.apps/scale").unwrap(),
            (strings(&["apps"]), strings(&["deployments/scale"]))
        );
        assert_eq!(
            short("widgets.example.com").unwrap(),
            (strings(&["example.com"]), strings(&["widgets"]))
        );
        assert_eq!(
            short("*/scale").unwrap(),
            (strings(&["*"]), strings(&["*/scale"]))
        );
        assert_eq!(short("*").unwrap(), (strings(&["*"]), strings(&["*"])));
        assert_eq!(short("*/*").unwrap(), (strings(&["*"]), strings(&["*/*"])));
    }

    #[test]
    fn a_subresource_a_built_in_resource_does_not_have_is_refused() {
        for (text, hint) in [
            (
                "pods/ephemeralcontainer",
                "did you mean pods/ephemeralcontainers?",
            ),
            ("pods/stauts", "did you mean pods/status?"),
            ("deployments.apps/scal", "did you mean deployments/scale?"),
            ("configmaps/status", "configmaps has no subresources; "),
            (
                "services/scale",
                "the subresources of services are proxy, status; ",
            ),
        ] {
            let error = short(text).expect_err(text);
            assert!(
                error.message.contains("has no subresource"),
                "{text}: {error:?}"
            );
            let got = error.hint.unwrap_or_default();
            assert!(got.starts_with(hint), "{text}: {got}");
        }
        for text in [
            "pods/ephemeralcontainers",
            "pods/exec",
            "pods/*",
            "deployments/scale",
            "deployments.apps/status",
            "serviceaccounts/token",
            "certificatesigningrequests.certificates.k8s.io/approval",
            "*/scale",
            // Not built in: not checked.
            "widgets.example.com/whatever",
        ] {
            assert!(short(text).is_ok(), "{text}: {:?}", short(text));
        }
        // Every listed resource is built in, in the group given.
        for (resource, group, _) in BUILT_IN_SUBRESOURCES {
            assert!(
                BUILT_IN.iter().any(|(n, g, _)| n == resource && g == group),
                "{resource} in {group:?}"
            );
        }
    }

    #[test]
    fn knows_which_built_in_resources_are_cluster_scoped() {
        for cluster in [
            "namespaces",
            "nodes",
            "clusterroles",
            "storageclasses",
            "customresourcedefinitions",
        ] {
            assert!(built_in_cluster_scoped(cluster), "{cluster}");
        }
        for namespaced in ["pods", "deployments", "roles", "ingresses", "widgets"] {
            assert!(!built_in_cluster_scoped(namespaced), "{namespaced}");
        }
    }

    #[test]
    fn rejects_unknown_and_malformed() {
        let err = short("pod").unwrap_err();
        assert!(err.message.contains("unknown resource \"pod\""), "{err:?}");
        assert!(short("Pods").is_err());
        assert!(short("pods/").is_err());
        assert!(short("deployments.").is_err());
    }

    fn hint(text: &str) -> (String, String) {
        let err = short(text).unwrap_err();
        (err.message, err.hint.unwrap_or_default())
    }

    #[test]
    fn refuses_the_group_first_spelling_with_the_right_one() {
        for (text, right) in [
            ("networking.k8s.io/ingresses", "ingresses.networking.k8s.io"),
            ("apps/deployments", "deployments.apps"),
            ("apps/v1/deployments", "deployments.apps"),
            ("batch/jobs", "jobs.batch"),
            (
                "rbac.authorization.k8s.io/roles",
                "roles.rbac.authorization.k8s.io",
            ),
            (
                "gateway.networking.k8s.io/httproutes",
                "httproutes.gateway.networking.k8s.io",
            ),
            (
                "cert-manager.io/certificates",
                "certificates.cert-manager.io",
            ),
            ("example.com/widgets", "widgets.example.com"),
        ] {
            let (message, hint) = hint(text);
            assert!(message.contains(text), "{text}: {message}");
            assert!(hint.ends_with(&format!(": {right}")), "{text}: {hint}");
        }
        let (message, _) = hint("apps");
        assert!(message.contains("names the API group apps"), "{message}");
    }

    #[test]
    fn refuses_unknown_groups_and_resources_of_built_in_groups() {
        let (message, hint_text) = hint("deployments.app");
        assert!(message.contains("unknown API group \"app\""), "{message}");
        assert_eq!(
            hint_text,
            "deployments is in the group \"apps\": write deployments.apps"
        );
        let (_, hint_text) = hint("pods.core");
        assert_eq!(hint_text, "pods is in the group \"\": write pods");
        let (_, hint_text) = hint("widgets.example");
        assert!(
            hint_text.contains("apps, autoscaling, batch, policy"),
            "{hint_text}"
        );
        let (message, hint_text) = hint("ingress.networking.k8s.io");
        assert!(message.contains("has no resource \"ingress\""), "{message}");
        assert!(hint_text.contains("ingresses"), "{hint_text}");
        assert!(hint_text.contains("full form"), "{hint_text}");
        let full = ResourcePattern::Full(ApiRule {
            api_groups: vec!["extensions".to_owned()],
            api_versions: vec!["*".to_owned()],
            resources: vec!["ingresses".to_owned()],
            scope: None,
        });
        assert!(full.normalize().is_err());
    }

    fn full(
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
        scope: Option<Scope>,
    ) -> Result<ResourceRule, ResourceError> {
        ResourcePattern::Full(ApiRule {
            api_groups: strings(groups),
            api_versions: strings(versions),
            resources: strings(resources),
            scope,
        })
        .normalize()
    }

    #[test]
    fn a_full_form_that_can_never_match_is_refused() {
        let error = full(&[""], &["*"], &["pods"], Some(Scope::Cluster)).expect_err("pods");
        assert_eq!(
            error.message,
            "scope Cluster never matches: pods is namespaced"
        );
        assert_eq!(
            error.hint.as_deref(),
            Some("write scope: Namespaced, or leave scope out")
        );
        let error = full(
            &[""],
            &["*"],
            &["nodes", "namespaces/status"],
            Some(Scope::Namespaced),
        )
        .expect_err("nodes");
        assert_eq!(
            error.message,
            "scope Namespaced never matches: nodes, namespaces are cluster-scoped"
        );
        let error = full(&[""], &["V1"], &["pods"], None).expect_err("V1");
        assert!(error.message.contains("\"V1\""), "{error:?}");
        assert_eq!(
            error.hint.as_deref(),
            Some("write v1, or \"*\" for all versions")
        );
        // Any resource of the wanted scope, or one the table does not know,
        // can match.
        for ok in [
            full(&[""], &["v1"], &["pods", "nodes"], Some(Scope::Cluster)),
            full(&["*"], &["*"], &["pods"], Some(Scope::Cluster)),
            full(&[""], &["*"], &["*"], Some(Scope::Cluster)),
            full(
                &["example.com"],
                &["v2alpha1"],
                &["widgets"],
                Some(Scope::Cluster),
            ),
            full(&[""], &["v1"], &["pods"], Some(Scope::Namespaced)),
            full(&[""], &["v1"], &["pods"], Some(Scope::All)),
        ] {
            assert!(ok.is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn keeps_custom_and_built_in_groups() {
        for text in [
            "certificates.cert-manager.io",
            "widgets.example.com/status",
            "httproutes.gateway.networking.k8s.io",
            "nodes.metrics.k8s.io",
            "ingresses.networking.k8s.io",
            "events.events.k8s.io",
            "*.apps",
            "deployments.apps/scale",
            "resourceclaims.resource.k8s.io",
        ] {
            assert!(short(text).is_ok(), "{text}: {:?}", short(text));
        }
        // A table resource of a newer Kubernetes, in the full form.
        let full = ResourcePattern::Full(ApiRule {
            api_groups: vec!["networking.k8s.io".to_owned()],
            api_versions: vec!["*".to_owned()],
            resources: vec!["futurethings".to_owned()],
            scope: None,
        });
        assert!(full.normalize().is_ok());
    }
}
