//! The rule-file language: the serde types of `RuleSet` documents, and loading
//! them from a directory with the position of every field.
//!
//! These types are the schema (`schema/ruleset.schema.json` is generated from
//! them). They only check shape: leaf values (regexes, paths, globs,
//! quantities) are checked by [`crate::plan::compile`], which reports every
//! problem with its `file:line:column`.

mod condition;
mod diagnostic;
pub mod limits;
mod load;
mod position;
pub mod resource;

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use condition::{Condition, DenyEntry, Operator};
pub use diagnostic::{Diagnostic, Diagnostics, Severity};
pub use load::{
    DirRead, FileCache, LoadError, Loaded, LoadedRuleSet, SourceFile, load_dir, load_files,
    load_str, read_dir, read_paths,
};
pub(crate) use load::{
    NOT_SHOWN, ReadProblem, field_path, is_rule_file, not_a_mapping, read_bounded, read_text,
    strip_location,
};
pub use position::PositionIndex;

/// The only `apiVersion` of rule files.
pub const API_VERSION: &str = "kadmit.dev/v1alpha1";

/// A rule-set document: a named group of rules.
//
// `R` is the rule type and `C` the type of the set's `when` conditions; the
// loader first reads both as untyped values so that one bad rule or
// condition does not hide the errors of the others.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "RuleSet", bound = "R: JsonSchema, C: JsonSchema")]
pub struct RuleSet<R = Rule, C = Condition> {
    /// Always `kadmit.dev/v1alpha1`.
    pub api_version: ApiVersion,
    /// Always `RuleSet`.
    pub kind: RuleSetKind,
    /// Name (and optional labels) of the rule set.
    pub metadata: Metadata,
    /// The rules and webhook settings.
    pub spec: RuleSetSpec<R, C>,
}

/// The `apiVersion` of kadmit's documents (rule sets and test suites).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ApiVersion {
    /// The first version.
    #[serde(rename = "kadmit.dev/v1alpha1")]
    V1Alpha1,
}

/// The `kind` of a rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RuleSetKind {
    /// A rule set.
    RuleSet,
}

/// Object metadata of a rule set.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// The rule set's name: a DNS label. It names the webhook entry, the URL
    /// paths `/validate/{name}` and `/mutate/{name}`, and metrics.
    pub name: String,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The body of a rule set.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    bound(deserialize = "R: Deserialize<'de>, C: Deserialize<'de>")
)]
#[schemars(bound = "R: JsonSchema, C: JsonSchema")]
pub struct RuleSetSpec<R, C = Condition> {
    /// What the API server does when kadmit cannot answer (webhook configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// Webhook timeout in seconds, 1 to 30 (webhook configuration; default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Namespace labels the API server must see before calling kadmit for this
    /// rule set. Reviews do not carry namespace labels, so this is only passed
    /// to the generated webhook configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Other rule sets whose rules this one applies too, before its own, as
    /// if they were written here (their own `when` guards included, and
    /// those of the sets an include of an include passes through). Names
    /// rule sets of the same directory; at most 8 levels deep, no cycles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    /// Conditions that guard every rule of the set (and every included rule):
    /// a rule applies only when all of them hold, as if each were the first
    /// entries of the rule's own `when`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<C>,
    /// CEL conditions on the request, as in the webhook API: the generated
    /// webhook entry carries them, so the API server sends only the
    /// requests for which all hold, and kadmit checks them too (like `when`),
    /// so offline tests and the server agree with what it would send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<MatchCondition>,
    /// The rules, applied in this order.
    pub rules: Vec<R>,
}

/// A `matchConditions` entry: a named CEL expression on `object`,
/// `oldObject` and `request` that must yield `true`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchCondition {
    /// Unique within the rule set; a qualified name (at most 63 characters
    /// of letters, digits, `-`, `_` and `.`, starting and ending with a
    /// letter or digit), as the API server requires.
    pub name: String,
    /// The CEL expression.
    pub expression: String,
}

/// Webhook failure policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum FailurePolicy {
    /// Reject the request when kadmit cannot be reached.
    Fail,
    /// Admit the request when kadmit cannot be reached.
    Ignore,
}

/// One rule: what it matches, and what it denies or mutates.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// Unique within the rule set; used in messages and metrics.
    pub name: String,
    /// What the rule is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Which requests the rule applies to.
    #[serde(rename = "match")]
    pub match_: Match,
    /// Extra conditions that must all hold for the rule to apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<Condition>,
    /// Violations: each entry whose condition holds is reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<DenyEntry>,
    /// Idempotent edits applied by `/mutate`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutate: Vec<MutationEntry>,
    /// What a violation does: `Deny` (default), `Warn` or `Audit`.
    #[serde(default)]
    pub action: Action,
    /// HTTP status code of a denial (default 403).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
}

/// What a violation of a rule does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum Action {
    /// Reject the request.
    #[default]
    Deny,
    /// Admit it with a warning per violation.
    Warn,
    /// Admit it; record the violation in metrics and audit annotations.
    Audit,
}

impl Action {
    /// Lowercase name for labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::Audit => "audit",
        }
    }
}

/// Which requests a rule applies to. Every given criterion must hold, and
/// any exclusion that hits skips the rule.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Match {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`. Default: `[CREATE, UPDATE]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<Vec<OperationPattern>>,
    /// Resources, in kubectl's `resource.group[/subresource]` form (`pods`,
    /// `deployments.apps/scale`, `*/scale`, `*`, `*/*`) or the webhook API's
    /// `{apiGroups, apiVersions, resources, scope}` form.
    pub resources: Vec<ResourcePattern>,
    /// Namespace globs the request must be in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespace globs that skip the rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_namespaces: Vec<String>,
    /// Labels the object (or, failing that, the old object) must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<LabelSelector>,
    /// User name globs the requester must match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// User name globs that skip the rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_users: Vec<String>,
    /// Group globs one of the requester's groups must match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Group globs that skip the rule when any of the requester's groups matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_groups: Vec<String>,
}

/// An operation in a match, or `*` for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum OperationPattern {
    /// Creation.
    #[serde(rename = "CREATE")]
    Create,
    /// Update.
    #[serde(rename = "UPDATE")]
    Update,
    /// Deletion.
    #[serde(rename = "DELETE")]
    Delete,
    /// Connect (exec, attach, port-forward, proxy).
    #[serde(rename = "CONNECT")]
    Connect,
    /// Every operation.
    #[serde(rename = "*")]
    All,
}

/// A resource pattern: the kubectl-style short string, or the webhook API form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ResourcePattern {
    /// `resource[.group][/subresource]`; `*` and `*/*` as in webhook rules.
    Short(String),
    /// `{apiGroups, apiVersions, resources, scope}`.
    Full(ApiRule),
}

// A hand-written visitor instead of `#[serde(untagged)]`: untagged enums
// discard the inner error and its location, so a typo inside the full form
// would be reported as "did not match any variant".
impl<'de> Deserialize<'de> for ResourcePattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PatternVisitor;
        impl<'de> Visitor<'de> for PatternVisitor {
            type Value = ResourcePattern;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource string such as \"deployments.apps\" or a map with apiGroups, apiVersions, resources and scope")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ResourcePattern::Short(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ApiRule::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ResourcePattern::Full)
            }
        }
        deserializer.deserialize_any(PatternVisitor)
    }
}

impl JsonSchema for ResourcePattern {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ResourcePattern".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let full = generator.subschema_for::<ApiRule>();
        schemars::json_schema!({
            "description": "kubectl-style `resource[.group][/subresource]` (`pods`, `deployments.apps/scale`, `*/scale`, `*`, `*/*`), or the webhook API form",
            "anyOf": [
                {"type": "string", "minLength": 1},
                full
            ]
        })
    }
}

/// A resource rule in the webhook API's form.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiRule {
    /// API groups (`""` is the core group, `*` all).
    pub api_groups: Vec<String>,
    /// API versions (`*` all).
    pub api_versions: Vec<String>,
    /// Resources with webhook semantics: `pods`, `pods/status`, `pods/*`,
    /// `*/scale`, `*` (no subresources), `*/*` (everything).
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// Scope of a resource rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum Scope {
    /// Cluster-scoped resources only.
    Cluster,
    /// Namespaced resources only.
    Namespaced,
    /// Both.
    #[serde(rename = "*")]
    All,
}

/// A Kubernetes label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Labels that must have exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based label requirement.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// Values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Operator of a label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum SelectorOperator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// Which part of a container image reference a condition compares, as a
/// container runtime resolves the reference. Every part of an invalid
/// reference is the empty string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ImagePart {
    /// Registry host, lower case, and port unless 443; `docker.io` when the
    /// reference names none or one of Docker Hub's names.
    Registry,
    /// Path within the registry, e.g. `library/nginx` or `team/app`.
    Repository,
    /// Tag as written; absent when none is written (the runtime then pulls
    /// `latest`).
    Tag,
    /// Digest (`sha256:...`); absent when there is none.
    Digest,
}

/// One mutation: exactly one of `setIfAbsent`, `mergeIfAbsent`,
/// `injectIfMissing`, `set`, or `forEach` with `mutate`; optionally guarded by
/// `when`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutationEntry {
    /// Write a value where none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_if_absent: Option<SetMutation>,
    /// Deep-merge a map; values already present win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_if_absent: Option<MergeMutation>,
    /// Append an element unless one with the same key is in the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject_if_missing: Option<InjectMutation>,
    /// Write a fixed value, replacing what is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<SetMutation>,
    /// Path of elements to mutate one by one; inside, `$` is the element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_each: Option<String>,
    /// Mutations applied to each `forEach` element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutate: Option<Vec<MutationEntry>>,
    /// Conditions that must all hold for this entry to apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<Condition>,
}

/// `setIfAbsent` / `set`: a path and a value (or a path to copy it from).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetMutation {
    /// Where to write; under `$.object` or `$.podSpec` (or the `forEach` element).
    pub path: String,
    /// The value to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Copy the value from another path; nothing happens when it is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

/// The source of a copied value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    /// Path of the value to copy (its first match).
    pub path: String,
}

/// `mergeIfAbsent`: a path and a map to merge into what is there.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MergeMutation {
    /// Where to merge.
    pub path: String,
    /// The map to merge (existing values win, at every depth).
    pub value: Value,
}

/// `injectIfMissing`: a list, the key that identifies elements, the element.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InjectMutation {
    /// Path of the list (created when missing).
    pub path: String,
    /// Field, or list of fields, that identify an element (e.g. `name`, or
    /// `[key, effect]` for tolerations).
    pub key: KeyFields,
    /// The element to append.
    pub value: Value,
}

/// One key field or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KeyFields {
    /// A single field.
    One(String),
    /// Several fields, all of which must be equal.
    Many(Vec<String>),
}

impl Default for KeyFields {
    fn default() -> Self {
        KeyFields::One(String::new())
    }
}

impl KeyFields {
    /// The fields as a list.
    pub fn fields(&self) -> Vec<String> {
        match self {
            KeyFields::One(field) => vec![field.clone()],
            KeyFields::Many(fields) => fields.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for KeyFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name or a list of field names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(KeyFields::One(v.to_owned()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<String>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(KeyFields::Many)
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

impl JsonSchema for KeyFields {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KeyFields".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
            ]
        })
    }
}

/// The JSON Schema of rule files, as written to `schema/ruleset.schema.json`.
pub fn json_schema() -> Value {
    let schema = schemars::schema_for!(RuleSet<Rule>);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}
