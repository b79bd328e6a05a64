//! The MutatingAdmissionPolicy API objects (`admissionregistration.k8s.io/v1`,
//! Kubernetes 1.36 and newer), which the `k8s-openapi` release kadmit builds
//! with does not have yet. Only the fields kadmit writes; the parts shared
//! with ValidatingAdmissionPolicy are `k8s-openapi`'s.

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, MatchResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

/// A MutatingAdmissionPolicy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MutatingAdmissionPolicy {
    /// Its name and labels.
    pub metadata: ObjectMeta,
    /// What it matches and does.
    pub spec: MutatingAdmissionPolicySpec,
}

/// What a MutatingAdmissionPolicy matches and does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicySpec {
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// CEL conditions on the request, all of which must hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<MatchCondition>,
    /// The requests it is for.
    pub match_constraints: MatchResources,
    /// The mutations, applied in order.
    pub mutations: Vec<Mutation>,
    /// `Never` or `IfNeeded`.
    pub reinvocation_policy: String,
}

/// One mutation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mutation {
    /// `JSONPatch` (kadmit writes no `ApplyConfiguration`).
    pub patch_type: String,
    /// The expression that yields the patch.
    pub json_patch: JsonPatch,
}

/// A CEL expression yielding a list of `JSONPatch` operations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsonPatch {
    /// The expression.
    pub expression: String,
}

/// A MutatingAdmissionPolicyBinding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MutatingAdmissionPolicyBinding {
    /// Its name and labels.
    pub metadata: ObjectMeta,
    /// The policy it binds.
    pub spec: MutatingAdmissionPolicyBindingSpec,
}

/// The policy a binding binds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicyBindingSpec {
    /// The policy's name.
    pub policy_name: String,
}
