//! Resource patterns normalized to the webhook API's form, the one both the
//! matcher and the generated webhook configurations use.
//!
//! The short form follows kubectl's `resource.group` notation. A bare name
//! (`deployments`) is resolved through the table of built-in Kubernetes
//! resources, so `deployments` means `deployments.apps`; an unknown bare name is
//! an error rather than a rule that silently never matches.

use super::{ApiRule, ResourcePattern, Scope};

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
    ("networkpolicies", "networking.k8s.io", false),
    ("poddisruptionbudgets", "policy", false),
    ("clusterrolebindings", "rbac.authorization.k8s.io", true),
    ("clusterroles", "rbac.authorization.k8s.io", true),
    ("rolebindings", "rbac.authorization.k8s.io", false),
    ("roles", "rbac.authorization.k8s.io", false),
    ("csidrivers", "storage.k8s.io", true),
    ("csinodes", "storage.k8s.io", true),
    ("storageclasses", "storage.k8s.io", true),
    ("volumeattachments", "storage.k8s.io", true),
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
        "validatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        true,
    ),
    ("customresourcedefinitions", "apiextensions.k8s.io", true),
    ("priorityclasses", "scheduling.k8s.io", true),
    ("leases", "coordination.k8s.io", false),
    ("endpointslices", "discovery.k8s.io", false),
    ("certificatesigningrequests", "certificates.k8s.io", true),
    ("runtimeclasses", "node.k8s.io", true),
];

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
    if let Some(sub) = sub {
        check_name(sub, text)?;
    }
    let (resource, group) = if resource_part == "*" {
        ("*", "*".to_owned())
    } else if let Some((resource, group)) = resource_part.split_once('.') {
        check_name(resource, text)?;
        check_group(group, text)?;
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
        }
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
    Ok(ResourceRule {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.unwrap_or(Scope::All),
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
}
