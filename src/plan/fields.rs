//! The fields each kind of object can have, as a graph of types, and the
//! walk that tells whether a path reads a field a matched kind has.
//!
//! A rule that reads `$.object.spec.container[*].image` on Pods compiles and
//! never fires: a Pod has `spec.containers`. [`Fields`] knows the built-in
//! kinds from k8s-openapi's schemas (built once per process, on first use)
//! and custom resources from OpenAPI documents (`kadmit check --openapi`,
//! [`super::openapi`]); compiling a rule walks each path through the kinds
//! the rule matches and warns when every one of them lacks a field the path
//! names.
//!
//! The walk only says "missing" when it is sure: below a map (labels,
//! `resources.limits`), a field that keeps unknown fields, an int-or-string,
//! a quantity, a `RawExtension`, a union of schemas or a scalar, it stops
//! and says nothing, as it does at a filter, a slice or a `..` step.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::path::Step;

/// A type in [`Fields::nodes`].
pub(crate) type NodeId = u32;

/// Anything: nothing below it is checked.
const OPEN: NodeId = 0;
/// A string, number or boolean: the schema does not say which.
const SCALAR: NodeId = 1;
/// A string.
const STRING: NodeId = 2;
/// A number (an integer or not: kadmit compares numbers by value).
const NUMBER: NodeId = 3;
/// A boolean.
const BOOLEAN: NodeId = 4;
/// The nodes every [`Fields`] starts with, shared by all its kinds.
const SHARED: NodeId = 5;

/// Deepest nesting of schemas followed while building; a schema deeper than
/// this is taken as [`OPEN`]. Real ones nest a few dozen levels.
const MAX_SCHEMA_DEPTH: usize = 200;

/// The JSON type of a field, where its schema says it: a scalar's, or
/// that it is a list or a map (which no scalar literal equals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Scalar {
    String,
    Number,
    Boolean,
    List,
    Map,
}

impl Scalar {
    /// The type of a literal value; `None` for `null`, which a field of
    /// any type can hold.
    pub(crate) fn of(value: &Value) -> Option<&'static str> {
        match value {
            Value::Null => None,
            Value::Bool(_) => Some("a boolean"),
            Value::Number(_) => Some("a number"),
            Value::String(_) => Some("a string"),
            Value::Array(_) => Some("a list"),
            Value::Object(_) => Some("a map"),
        }
    }

    /// `a boolean`, as [`Scalar::of`] names a value's type.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scalar::String => "a string",
            Scalar::Number => "a number",
            Scalar::Boolean => "a boolean",
            Scalar::List => "a list",
            Scalar::Map => "a map",
        }
    }
}

#[derive(Debug, Clone)]
enum Node {
    Open,
    /// A scalar, of the type given when the schema gives one.
    Scalar(Option<Scalar>),
    Object {
        /// The type's name (`PodSpec`), for messages; `None` when inline.
        name: Option<Box<str>>,
        /// Field names and their types, sorted by name.
        fields: Vec<(Box<str>, NodeId)>,
        /// The type of any other key: the values of a map.
        other: Option<NodeId>,
    },
    Array(NodeId),
}

/// A kind of object [`Fields`] knows, and the resource rules match it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// API group, `""` for core.
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Plural resource name (`deployments`).
    pub resource: String,
    /// Kind (`Deployment`).
    pub kind: String,
    root: NodeId,
}

impl Kind {
    /// A kind whose schema is still to be built ([`Fields::from_schemas`]).
    pub fn new(group: &str, version: &str, resource: &str, kind: &str) -> Kind {
        Kind {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            kind: kind.to_owned(),
            root: OPEN,
        }
    }

    /// `Deployment (apps/v1)`, `Pod (v1)`.
    pub fn label(&self) -> String {
        if self.group.is_empty() {
            format!("{} ({})", self.kind, self.version)
        } else {
            format!("{} ({}/{})", self.kind, self.group, self.version)
        }
    }
}

/// The types of a set of kinds, built from JSON schemas.
#[derive(Debug, Clone)]
pub struct Fields {
    nodes: Vec<Node>,
    kinds: Vec<Kind>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            nodes: vec![
                Node::Open,
                Node::Scalar(None),
                Node::Scalar(Some(Scalar::String)),
                Node::Scalar(Some(Scalar::Number)),
                Node::Scalar(Some(Scalar::Boolean)),
            ],
            kinds: Vec::new(),
        }
    }
}

/// What walking a path through a type found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Walk {
    /// The types the path can select.
    Reached(Vec<NodeId>),
    /// The walk stopped where it could not be sure (a map value, an open
    /// type, a scalar, an index on an object).
    Unknown,
    /// A step names a member no type there has.
    Missing(Missing),
}

/// A member a path names that its types lack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    /// The steps up to the missing member, as written from the root
    /// (`spec.container`).
    pub field: String,
    /// The path with the nearest real member instead (`spec.containers`).
    pub suggestion: Option<String>,
    /// True when the member follows a list: names select nothing from a list.
    pub after_list: bool,
}

/// Kubernetes' built-in kinds, by resource, with their Rust types.
macro_rules! built_in_kinds {
    ($generator:expr, $roots:expr, [$($ty:ty),* $(,)?]) => {
        $( add_kind::<$ty>($generator, $roots); )*
    };
}

fn add_kind<T: k8s_openapi::Resource + schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
    roots: &mut Vec<(Kind, Value)>,
) {
    let schema = generator.subschema_for::<T>().to_value();
    roots.push((
        Kind {
            group: T::GROUP.to_owned(),
            version: T::VERSION.to_owned(),
            resource: T::URL_PATH_SEGMENT.to_owned(),
            kind: T::KIND.to_owned(),
            root: OPEN,
        },
        schema,
    ));
}

static BUILT_IN: LazyLock<Fields> = LazyLock::new(|| {
    use k8s_openapi::api::{apps, batch, core, networking, policy, rbac, scheduling, storage};
    let mut generator = schemars::SchemaGenerator::default();
    let mut roots = Vec::new();
    // Every namespaced or cluster-scoped kind of `rules::resource`'s table
    // with one served version; kinds served in several versions at once
    // (autoscaling's HorizontalPodAutoscaler) are left out, since a rule
    // may be sent either version.
    built_in_kinds!(
        &mut generator,
        &mut roots,
        [
            core::v1::Pod,
            core::v1::PodTemplate,
            core::v1::ReplicationController,
            core::v1::Service,
            core::v1::ConfigMap,
            core::v1::Secret,
            core::v1::Namespace,
            core::v1::ServiceAccount,
            core::v1::PersistentVolumeClaim,
            core::v1::PersistentVolume,
            core::v1::Node,
            core::v1::LimitRange,
            core::v1::ResourceQuota,
            apps::v1::Deployment,
            apps::v1::StatefulSet,
            apps::v1::DaemonSet,
            apps::v1::ReplicaSet,
            batch::v1::Job,
            batch::v1::CronJob,
            networking::v1::Ingress,
            networking::v1::IngressClass,
            networking::v1::NetworkPolicy,
            policy::v1::PodDisruptionBudget,
            rbac::v1::Role,
            rbac::v1::RoleBinding,
            rbac::v1::ClusterRole,
            rbac::v1::ClusterRoleBinding,
            scheduling::v1::PriorityClass,
            storage::v1::StorageClass,
        ]
    );
    let definitions = generator.take_definitions(true);
    Fields::from_schemas(&definitions, roots)
});

impl Fields {
    /// The built-in kinds, built on first use and kept for the process.
    pub fn built_in() -> &'static Fields {
        &BUILT_IN
    }

    /// Builds the types of `roots` (each a kind and its schema, usually a
    /// `$ref`), resolving references (`#/$defs/`, `#/components/schemas/`,
    /// `#/definitions/`) in `definitions`.
    pub fn from_schemas(definitions: &Map<String, Value>, roots: Vec<(Kind, Value)>) -> Fields {
        let mut builder = Builder {
            fields: Fields::default(),
            definitions,
            built: HashMap::new(),
        };
        for (mut kind, schema) in roots {
            kind.root = builder.node(&schema, 0);
            builder.fields.kinds.push(kind);
        }
        builder.fields
    }

    /// Adds the kinds of `other`.
    pub fn extend(&mut self, other: Fields) {
        // `other`'s own nodes follow the shared ones ([`SHARED`]).
        let offset = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX) - SHARED;
        let shift = |id: NodeId| {
            if id < SHARED {
                id
            } else {
                id.saturating_add(offset)
            }
        };
        for node in other.nodes.into_iter().skip(SHARED as usize) {
            self.nodes.push(match node {
                Node::Object {
                    name,
                    fields,
                    other,
                } => Node::Object {
                    name,
                    fields: fields.into_iter().map(|(k, id)| (k, shift(id))).collect(),
                    other: other.map(shift),
                },
                Node::Array(item) => Node::Array(shift(item)),
                node => node,
            });
        }
        self.kinds.extend(other.kinds.into_iter().map(|kind| Kind {
            root: shift(kind.root),
            ..kind
        }));
    }

    /// The kinds known.
    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    /// The kinds of resource `resource` in `group`, in every version known.
    pub fn kinds_of(&self, group: &str, resource: &str) -> Vec<&Kind> {
        self.kinds
            .iter()
            .filter(|kind| kind.group == group && kind.resource == resource)
            .collect()
    }

    /// Where `kind`'s objects start.
    pub(crate) fn root(&self, kind: &Kind) -> NodeId {
        kind.root
    }

    /// The type's name, when it has one.
    #[cfg(test)]
    fn name(&self, id: NodeId) -> Option<&str> {
        match self.node(id) {
            Node::Object { name, .. } => name.as_deref(),
            _ => None,
        }
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes.get(id as usize).unwrap_or(&Node::Open)
    }

    /// The member `key` of the types `from`, or `None` when none has it.
    fn member(&self, from: &[NodeId], key: &str) -> Vec<NodeId> {
        let mut out = Vec::new();
        for &id in from {
            if let Node::Object { fields, other, .. } = self.node(id) {
                match fields.binary_search_by(|(name, _)| (**name).cmp(key)) {
                    Ok(i) => out.push(fields[i].1),
                    Err(_) => out.extend(*other),
                }
            }
        }
        out
    }

    /// The JSON types of `types` when every one is a scalar whose schema
    /// gives its type, a list or an object; `None` otherwise.
    pub(crate) fn scalars(&self, types: &[NodeId]) -> Option<Vec<Scalar>> {
        let mut out: Vec<Scalar> = types
            .iter()
            .map(|&id| match self.node(id) {
                Node::Scalar(Some(scalar)) => Some(*scalar),
                Node::Array(_) => Some(Scalar::List),
                Node::Object { .. } => Some(Scalar::Map),
                Node::Scalar(None) | Node::Open => None,
            })
            .collect::<Option<_>>()?;
        out.sort_unstable();
        out.dedup();
        (!out.is_empty()).then_some(out)
    }

    /// Whether every one of `types` is a list.
    pub(crate) fn all_lists(&self, types: &[NodeId]) -> bool {
        types
            .iter()
            .all(|&id| matches!(self.node(id), Node::Array(_)))
    }

    /// Walks `steps` from the types `from`.
    pub(crate) fn walk(&self, from: &[NodeId], steps: &[Step]) -> Walk {
        let mut current: Vec<NodeId> = from.to_vec();
        for (i, step) in steps.iter().enumerate() {
            // Nothing below an open type or a scalar is certain.
            if current
                .iter()
                .any(|&id| matches!(self.node(id), Node::Open | Node::Scalar(_)))
            {
                return Walk::Unknown;
            }
            let mut next = Vec::new();
            let alternatives = match step {
                Step::Union(steps) => steps.as_slice(),
                step => std::slice::from_ref(step),
            };
            for alternative in alternatives {
                match alternative {
                    Step::Key(key) => {
                        let found = self.member(&current, key);
                        if found.is_empty() {
                            return Walk::Missing(self.missing(&current, &steps[..i], key));
                        }
                        next.extend(found);
                    }
                    Step::Index(_) | Step::Wildcard => {
                        for &id in &current {
                            match self.node(id) {
                                Node::Array(item) => next.push(*item),
                                Node::Object { fields, other, .. }
                                    if matches!(alternative, Step::Wildcard) =>
                                {
                                    next.extend(fields.iter().map(|(_, id)| *id));
                                    next.extend(*other);
                                }
                                _ => {}
                            }
                        }
                    }
                    // Unions do not nest in RFC 9535.
                    Step::Union(_) => return Walk::Unknown,
                }
            }
            if next.is_empty() {
                return Walk::Unknown;
            }
            next.sort_unstable();
            next.dedup();
            current = next;
        }
        Walk::Reached(current)
    }

    /// Describes `key`, missing from the types `parents` reached by `before`.
    fn missing(&self, parents: &[NodeId], before: &[Step], key: &str) -> Missing {
        let field = render(before, Some(key));
        let items: Vec<NodeId> = parents
            .iter()
            .filter_map(|&id| match self.node(id) {
                Node::Array(item) => Some(*item),
                _ => None,
            })
            .collect();
        if items.len() == parents.len() {
            // `containers.image`: a list has no members.
            let suggestion = (!self.member(&items, key).is_empty()).then(|| {
                let mut with_wildcard = before.to_vec();
                with_wildcard.push(Step::Wildcard);
                render(&with_wildcard, Some(key))
            });
            return Missing {
                field,
                suggestion,
                after_list: true,
            };
        }
        let names = parents.iter().flat_map(|&id| match self.node(id) {
            Node::Object { fields, .. } => fields.as_slice(),
            _ => &[],
        });
        let suggestion =
            nearest(key, names.map(|(name, _)| &**name)).map(|name| render(before, Some(name)));
        Missing {
            field,
            suggestion,
            after_list: false,
        }
    }
}

/// `steps` (then `last`) as a member path: `spec.containers[*].image`.
pub(crate) fn render(steps: &[Step], last: Option<&str>) -> String {
    fn key(out: &mut String, key: &str) {
        let plain = key
            .chars()
            .enumerate()
            .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit()));
        if plain && !key.is_empty() {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(key);
        } else {
            let escaped = key.replace('\\', "\\\\").replace('\'', "\\'");
            out.push_str(&format!("['{escaped}']"));
        }
    }
    fn step(out: &mut String, step: &Step) {
        match step {
            Step::Key(name) => key(out, name),
            Step::Index(index) => out.push_str(&format!("[{index}]")),
            Step::Wildcard => out.push_str("[*]"),
            Step::Union(steps) => {
                let parts: Vec<String> = steps
                    .iter()
                    .map(|step| match step {
                        Step::Key(name) => format!("'{name}'"),
                        Step::Index(index) => index.to_string(),
                        _ => "*".to_owned(),
                    })
                    .collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
        }
    }
    let mut out = String::new();
    steps.iter().for_each(|s| step(&mut out, s));
    if let Some(last) = last {
        key(&mut out, last);
    }
    out
}

/// The candidate nearest to `name` by edit distance (a swap of two neighbours
/// counting as one edit), ignoring case, when it
/// is close enough to be the name meant: at most a quarter of its length
/// away (at least one edit, at most three).
///
/// A candidate whose length differs from `name`'s by more than that is not
/// measured at all: the distance is at least the difference, and measuring
/// costs the product of the two lengths, so a rule file's 5,000-character
/// field name costs as little as a short one.
pub(crate) fn nearest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let allowed = (name.chars().count() / 4).clamp(1, 3);
    let lower = name.to_lowercase();
    let lower_length = lower.chars().count();
    candidates
        .filter(|candidate| *candidate != name)
        .filter_map(|candidate| {
            let lowered = candidate.to_lowercase();
            if lowered.chars().count().abs_diff(lower_length) > allowed {
                return None;
            }
            let distance = strsim::osa_distance(&lower, &lowered);
            // Same distance: the one that differs only in case, then the
            // closest in length, then the first in order.
            let case_only = usize::from(!candidate.eq_ignore_ascii_case(name));
            let length = candidate.len().abs_diff(name.len());
            Some(((distance, case_only, length), candidate))
        })
        .filter(|((distance, _, _), _)| *distance <= allowed)
        .min_by_key(|(key, _)| *key)
        .map(|(_, candidate)| candidate)
}

/// Builds [`Node`]s from JSON schemas, each referenced schema once.
struct Builder<'a> {
    fields: Fields,
    definitions: &'a Map<String, Value>,
    /// Referenced schemas already built (or being built: a cycle).
    built: HashMap<&'a str, NodeId>,
}

fn flag(map: &Map<String, Value>, name: &str) -> bool {
    map.get(name).and_then(Value::as_bool) == Some(true)
}

impl<'a> Builder<'a> {
    fn push(&mut self, node: Node) -> NodeId {
        let id = u32::try_from(self.fields.nodes.len()).unwrap_or(OPEN);
        if id == OPEN {
            return OPEN;
        }
        self.fields.nodes.push(node);
        id
    }

    fn node(&mut self, schema: &Value, depth: usize) -> NodeId {
        if depth > MAX_SCHEMA_DEPTH {
            return OPEN;
        }
        let Some(map) = schema.as_object() else {
            return OPEN;
        };
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            return self.reference(reference, depth);
        }
        if flag(map, "x-kubernetes-preserve-unknown-fields")
            || flag(map, "x-kubernetes-int-or-string")
            || ["anyOf", "oneOf", "not", "if"]
                .iter()
                .any(|key| map.contains_key(*key))
        {
            return OPEN;
        }
        if let Some(all) = map.get("allOf") {
            // Kubernetes' OpenAPI v3 wraps a reference in allOf to give it
            // a description or a default.
            return match all.as_array().map(Vec::as_slice) {
                Some([one]) if !map.contains_key("properties") && !map.contains_key("items") => {
                    self.node(one, depth + 1)
                }
                _ => OPEN,
            };
        }
        match map.get("type").and_then(Value::as_str) {
            Some("array") => match map.get("items") {
                Some(items) => {
                    let item = self.node(items, depth + 1);
                    self.push(Node::Array(item))
                }
                None => OPEN,
            },
            Some("object") | None => {
                let properties = map.get("properties").and_then(Value::as_object);
                let other = match map.get("additionalProperties") {
                    None | Some(Value::Bool(false)) => None,
                    Some(Value::Bool(true)) => Some(OPEN),
                    Some(schema) => Some(self.node(schema, depth + 1)),
                };
                let Some(properties) = properties else {
                    // A map, or an object without a schema (RawExtension).
                    return match other {
                        Some(other) => self.push(Node::Object {
                            name: None,
                            fields: Vec::new(),
                            other: Some(other),
                        }),
                        None => OPEN,
                    };
                };
                let mut fields: Vec<(Box<str>, NodeId)> = properties
                    .iter()
                    .map(|(name, schema)| (Box::from(name.as_str()), self.node(schema, depth + 1)))
                    .collect();
                // An embedded object (a custom resource's root, a template)
                // has these whether its schema lists them or not: the API
                // server fills them in.
                if flag(map, "x-kubernetes-embedded-resource") {
                    for (name, id) in [("apiVersion", STRING), ("kind", STRING), ("metadata", OPEN)]
                    {
                        if !fields.iter().any(|(field, _)| &**field == name) {
                            fields.push((Box::from(name), id));
                        }
                    }
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                self.push(Node::Object {
                    name: None,
                    fields,
                    other,
                })
            }
            Some("string")
                if map.get("format").and_then(Value::as_str) == Some("int-or-string") =>
            {
                OPEN
            }
            Some("string") => STRING,
            Some("integer" | "number") => NUMBER,
            Some("boolean") => BOOLEAN,
            Some(_) => SCALAR,
        }
    }

    fn reference(&mut self, reference: &str, depth: usize) -> NodeId {
        let name = ["#/$defs/", "#/components/schemas/", "#/definitions/"]
            .iter()
            .find_map(|prefix| reference.strip_prefix(prefix));
        let Some(name) = name else {
            return OPEN;
        };
        if let Some(&id) = self.built.get(name) {
            return id;
        }
        let Some((name, schema)) = self.definitions.get_key_value(name) else {
            return OPEN;
        };
        // A placeholder first, so a schema that refers to itself ends.
        let id = self.push(Node::Open);
        if id == OPEN {
            return OPEN;
        }
        self.built.insert(name.as_str(), id);
        let built = self.node(schema, depth + 1);
        let mut node = self.fields.node(built).clone();
        if let Node::Object { name: own, .. } = &mut node {
            let short = name.rsplit('.').next().unwrap_or(name);
            *own = Some(Box::from(short));
        }
        if let Some(slot) = self.fields.nodes.get_mut(id as usize) {
            *slot = node;
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn steps(text: &str) -> Vec<Step> {
        text.split('.')
            .map(|part| match part {
                "*" => Step::Wildcard,
                key => Step::Key(Arc::from(key)),
            })
            .collect()
    }

    fn walk(resource: &str, path: &str) -> Walk {
        let fields = Fields::built_in();
        let group = match resource {
            "deployments" => "apps",
            _ => "",
        };
        let kind = fields.kinds_of(group, resource)[0];
        fields.walk(&[fields.root(kind)], &steps(path))
    }

    fn missing(resource: &str, path: &str) -> (String, Option<String>) {
        match walk(resource, path) {
            Walk::Missing(missing) => (missing.field, missing.suggestion),
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn knows_the_json_type_of_scalar_fields() {
        let scalars = |resource: &str, path: &str| match walk(resource, path) {
            Walk::Reached(types) => Fields::built_in().scalars(&types),
            other => panic!("{path}: {other:?}"),
        };
        let one = |scalar| Some(vec![scalar]);
        assert_eq!(scalars("pods", "spec.hostNetwork"), one(Scalar::Boolean));
        assert_eq!(
            scalars("pods", "spec.containers.*.securityContext.privileged"),
            one(Scalar::Boolean)
        );
        assert_eq!(
            scalars("pods", "spec.securityContext.runAsUser"),
            one(Scalar::Number)
        );
        assert_eq!(
            scalars("pods", "spec.containers.*.image"),
            one(Scalar::String)
        );
        assert_eq!(scalars("pods", "metadata.labels.app"), one(Scalar::String));
        assert_eq!(scalars("deployments", "spec.replicas"), one(Scalar::Number));
        // Lists and objects are such; quantities (their schema gives no
        // type) and int-or-string fields have no one type.
        assert_eq!(
            scalars("pods", "spec.containers.*.resources.limits.cpu"),
            None
        );
        assert_eq!(scalars("pods", "spec.containers"), one(Scalar::List));
        assert_eq!(scalars("pods", "spec.securityContext"), one(Scalar::Map));
        assert_eq!(scalars("pods", "metadata.labels"), one(Scalar::Map));
        assert!(matches!(
            walk("pods", "spec.containers.*.livenessProbe.httpGet.port"),
            Walk::Reached(types) if Fields::built_in().scalars(&types).is_none()
        ));
        assert!(matches!(
            walk("services", "spec.ports.*.targetPort"),
            Walk::Reached(types) if Fields::built_in().scalars(&types).is_none()
        ));
    }

    #[test]
    fn knows_the_fields_of_built_in_kinds() {
        for path in [
            "spec.containers.*.image",
            "spec.hostNetwork",
            "spec.containers.*.securityContext.capabilities.add.*",
            "metadata.labels",
        ] {
            assert!(matches!(walk("pods", path), Walk::Reached(_)), "{path}");
        }
        assert!(matches!(
            walk("deployments", "spec.template.spec.containers.*.image"),
            Walk::Reached(_)
        ));
        let fields = Fields::built_in();
        let kind = fields.kinds_of("", "pods")[0];
        assert_eq!(kind.label(), "Pod (v1)");
        let Walk::Reached(spec) = fields.walk(&[fields.root(kind)], &steps("spec")) else {
            panic!("spec");
        };
        assert_eq!(fields.name(spec[0]), Some("PodSpec"));
    }

    #[test]
    fn names_the_missing_member_and_the_nearest_real_one() {
        assert_eq!(
            missing("pods", "spec.container.*.image"),
            (
                "spec.container".to_owned(),
                Some("spec.containers".to_owned())
            )
        );
        assert_eq!(
            missing("pods", "spec.hostnetwork"),
            (
                "spec.hostnetwork".to_owned(),
                Some("spec.hostNetwork".to_owned())
            )
        );
        assert_eq!(
            missing("pods", "spec.template.spec"),
            ("spec.template".to_owned(), None)
        );
        assert_eq!(
            missing("pods", "spec.containers.image"),
            (
                "spec.containers.image".to_owned(),
                Some("spec.containers[*].image".to_owned())
            )
        );
    }

    #[test]
    fn says_nothing_below_maps_and_open_types() {
        for path in [
            // Maps: any key.
            "metadata.labels.anything",
            "metadata.annotations.x",
            "spec.nodeSelector.disktype",
            "spec.containers.*.resources.limits.nvidia",
            // Int-or-string and quantities: nothing below them.
            "spec.containers.*.ports.*.containerPort.x",
            "spec.containers.*.livenessProbe.httpGet.port.x",
            "spec.overhead.cpu.x",
            // A wildcard over an object's fields reaches all of them.
            "spec.*.image",
        ] {
            assert!(
                !matches!(walk("pods", path), Walk::Missing(_)),
                "{path}: {:?}",
                walk("pods", path)
            );
        }
        assert!(!matches!(
            walk("deployments", "spec.strategy.rollingUpdate.maxSurge.x"),
            Walk::Missing(_)
        ));
    }

    #[test]
    fn unions_check_each_member() {
        let fields = Fields::built_in();
        let kind = fields.kinds_of("", "pods")[0];
        let union = |keys: &[&str]| {
            vec![
                Step::Key(Arc::from("spec")),
                Step::Union(keys.iter().map(|k| Step::Key(Arc::from(*k))).collect()),
                Step::Wildcard,
                Step::Key(Arc::from("image")),
            ]
        };
        assert!(matches!(
            fields.walk(
                &[fields.root(kind)],
                &union(&["containers", "initContainers"])
            ),
            Walk::Reached(_)
        ));
        let Walk::Missing(missing) = fields.walk(
            &[fields.root(kind)],
            &union(&["containers", "initContainer"]),
        ) else {
            panic!("a misspelt member");
        };
        assert_eq!(missing.field, "spec.initContainer");
        assert_eq!(missing.suggestion.as_deref(), Some("spec.initContainers"));
    }

    #[test]
    fn nearest_takes_close_names_only() {
        let names = ["containers", "initContainers", "hostNetwork", "hostname"];
        let near = |name| nearest(name, names.iter().copied());
        assert_eq!(near("container"), Some("containers"));
        assert_eq!(near("hostnetwork"), Some("hostNetwork"));
        assert_eq!(near("initcontainer"), Some("initContainers"));
        assert_eq!(near("template"), None);
        assert_eq!(near("x"), None);
    }

    #[test]
    fn nearest_does_not_measure_names_far_longer_than_any_candidate() {
        // Measuring costs the product of the lengths: a 1 MiB name against
        // these would take about a minute. Skipped, it returns at once.
        let names = ["containers", "initContainers", "hostNetwork"];
        let long = "containers".repeat(100_000);
        assert_eq!(nearest(&long, names.iter().copied()), None);
        // A name close in length is still measured.
        assert_eq!(
            nearest("hostNetwrk", names.iter().copied()),
            Some("hostNetwork")
        );
    }

    #[test]
    fn references_and_cycles_resolve() {
        let definitions: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "a.Tree": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/a.Tree"}},
                "meta": {"allOf": [{"$ref": "#/components/schemas/a.Meta"}], "description": "d"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
            "a.Meta": {"type": "object", "properties": {"name": {"type": "string"}}},
        }))
        .expect("a map");
        let kind = Kind {
            group: "example.com".to_owned(),
            version: "v1".to_owned(),
            resource: "trees".to_owned(),
            kind: "Tree".to_owned(),
            root: OPEN,
        };
        let schema = serde_json::json!({"$ref": "#/components/schemas/a.Tree"});
        let fields = Fields::from_schemas(&definitions, vec![(kind, schema)]);
        let kind = &fields.kinds()[0];
        let root = [fields.root(kind)];
        assert!(matches!(
            fields.walk(&root, &steps("children.*.children.*.meta.name")),
            Walk::Reached(_)
        ));
        assert!(matches!(
            fields.walk(&root, &steps("free.anything.below")),
            Walk::Unknown
        ));
        assert!(matches!(
            fields.walk(&root, &steps("children.*.meta.nmae")),
            Walk::Missing(Missing { suggestion: Some(s), .. }) if s == "children[*].meta.name"
        ));
    }
}
