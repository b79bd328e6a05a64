//! Test suites of rules: the serde types of `Suite` files, which name rule
//! files and a list of cases (an input and what must happen to it), loading
//! them under the bounds of rule files, and running their cases (`kadmit
//! verify`).
//!
//! These types are the schema of suite files (`schema/suite.schema.json` is
//! generated from them). A suite file is input kadmit must survive, like a
//! rule file: [`load()`] applies the size, depth and alias bounds of
//! [`crate::rules::limits`] before parsing, caps the number of cases and the
//! size of every object, and reports every problem of a suite at once as
//! `file:line:column: field.path: message (hint)`.
//!
//! ```yaml
//! apiVersion: kadmit.dev/v1alpha1
//! kind: Suite
//! metadata:
//!   name: images
//! rules: [../../rules/20-images.yaml]
//! cases:
//!   - name: denies-implicit-latest
//!     objectFile: pod.yaml
//!     expect:
//!       allowed: false
//!       denies: [images/disallow-latest-tag]
//!       messages: ["container web uses the latest tag"]
//! ```

mod diff;
mod load;
mod run;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::review::Operation;
use crate::rules::ApiVersion;

pub use diff::unified;
pub use load::{LoadedCase, LoadedSuite, load};
pub use run::{CaseResult, Compiled, Mismatch, compile, run_case};

/// What suite files are called inside a directory given to `kadmit verify`.
pub const SUITE_SUFFIXES: [&str; 2] = [".suite.yaml", ".suite.yml"];

/// Most cases in one suite file: enough for every rule of a large rule set
/// several times over; a suite that needs more is better split.
pub const MAX_CASES: usize = 1_000;

/// Largest object a case may hold or name (an input, an old object, a
/// review, an expected object), in bytes of its file or of its JSON
/// encoding: the API server's limit on one request body (3 MiB).
pub const MAX_OBJECT_BYTES: u64 = 3 << 20;

/// Most bytes of object files one suite reads in total (each file once,
/// however many cases name it).
pub const MAX_SUITE_INPUT_BYTES: u64 = 64 << 20;

/// Most memory the objects of one suite's cases may take once read: each
/// file once parsed (as [`crate::review::parsed_size`] counts it), and once
/// more for every case that names it, whose request holds its own copy of
/// the object's JSON text (a `patchedFile`, its own parsed copy): a
/// thousand cases naming one 3 MiB file took 1.9 GB before this bound.
/// `kadmit verify` runs one suite at a time, so this bounds the run too.
pub const MAX_SUITE_OBJECT_BYTES: u64 = 512 << 20;

/// A suite document: rule files and the cases to run against them.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "Suite", bound = "C: JsonSchema")]
pub struct Suite<C = Case> {
    /// Always `kadmit.dev/v1alpha1`.
    pub api_version: ApiVersion,
    /// Always `Suite`.
    pub kind: SuiteKind,
    /// The suite's name (the file name without `.suite.yaml` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<SuiteMetadata>,
    /// Rule files and directories of rule files, relative to the suite
    /// file, loaded together as `kadmit check` loads one directory.
    pub rules: Vec<String>,
    /// The cases, run in order.
    pub cases: Vec<C>,
}

/// The `kind` of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum SuiteKind {
    /// A test suite of rules.
    Suite,
}

/// Object metadata of a suite.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SuiteMetadata {
    /// The name cases are reported under (`test NAME::case ... ok`).
    pub name: String,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One case: an input, how it arrives, and what must happen to it.
///
/// The input is exactly one of `object`, `objectFile`, `review` and
/// `reviewFile`. A plain object becomes a request as `kadmit test` builds
/// one; a review is used unchanged, so it takes none of the request fields.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Case {
    /// The case's name, unique in the suite.
    pub name: String,
    /// The object, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// A file holding the object (JSON or YAML), relative to the suite file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_file: Option<String>,
    /// The old object of an UPDATE, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// A file holding the old object of an UPDATE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object_file: Option<String>,
    /// A whole AdmissionReview (`v1` or `v1beta1`), inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Value>,
    /// A file holding an AdmissionReview, such as one captured from an API
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_file: Option<String>,
    /// The operation (default `CREATE`); on `DELETE` the object is the one
    /// being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// Namespace, when the object names none (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Plural resource for kinds kadmit cannot derive (`widgets.example.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Subresource (`status`, `scale`, `exec`, `ephemeralcontainers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    /// Requesting user (default `kadmit-test`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Groups of the requesting user (default `[system:authenticated]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    /// Only this rule set, as `/validate/{ruleset}` and `/mutate/{ruleset}`
    /// would run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_set: Option<String>,
    /// What must happen; every field given is checked, and at least one
    /// must be.
    pub expect: Expect,
}

/// What must happen to a case's request, after the mutating half and the
/// validating half on the mutated object, as the API server calls kadmit.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Whether the request is admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<bool>,
    /// Exactly the rules that deny it, as `rule-set/rule`, in any order
    /// (`[]`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denies: Option<Vec<String>>,
    /// Exactly the rules that warn about it, as `rule-set/rule`, in any
    /// order (`[]`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warns: Option<Vec<String>>,
    /// Texts that must each appear in the denial message or in a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<String>>,
    /// The object after mutation, inline (the input itself when nothing
    /// changes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patched: Option<Value>,
    /// A file holding the object after mutation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patched_file: Option<String>,
    /// The JSON Patch the mutating half answers (`[]`: no change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<Vec<Value>>,
}

/// The JSON Schema of suite files, as `schema/suite.schema.json` holds it.
pub fn json_schema() -> Value {
    let schema = schemars::schema_for!(Suite<Case>);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}
