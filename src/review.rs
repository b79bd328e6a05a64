//! The AdmissionReview wire format: decoding a review into a [`Request`] and encoding a
//! [`Verdict`] as the response, in the API version the caller used.
//!
//! No policy logic lives here. The object and old object stay raw JSON
//! ([`RawValue`]) so a review that no rule can match is answered without parsing
//! them (the object is most of the body and parsing it is most of the cost).

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::eval::Verdict;

/// The two AdmissionReview versions kube-apiserver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewVersion {
    /// `admission.k8s.io/v1`
    V1,
    /// `admission.k8s.io/v1beta1`
    V1Beta1,
}

impl ReviewVersion {
    /// The `apiVersion` string of this version.
    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "admission.k8s.io/v1",
            ReviewVersion::V1Beta1 => "admission.k8s.io/v1beta1",
        }
    }

    fn parse(api_version: &str) -> Option<Self> {
        match api_version {
            "admission.k8s.io/v1" => Some(ReviewVersion::V1),
            "admission.k8s.io/v1beta1" => Some(ReviewVersion::V1Beta1),
            _ => None,
        }
    }
}

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// The object is being created.
    Create,
    /// The object is being replaced or patched.
    Update,
    /// The object is being deleted.
    Delete,
    /// A connection to the object (exec, attach, port-forward, proxy).
    Connect,
}

impl Operation {
    /// Every operation, in a fixed order.
    pub const ALL: [Operation; 4] = [
        Operation::Create,
        Operation::Update,
        Operation::Delete,
        Operation::Connect,
    ];

    /// The wire name (`CREATE`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// Position in [`Operation::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{group, version, kind}` of the object in a review.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionKind {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// `{group, version, resource}` being admitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionResource {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Plural resource name.
    #[serde(default)]
    pub resource: String,
}

/// Who made the request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct UserInfo {
    /// User name (`system:serviceaccount:NS:NAME` for service accounts).
    #[serde(default)]
    pub username: String,
    /// User uid, when the authenticator sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Groups the user belongs to.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra authenticator attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The `request` of an AdmissionReview: everything the engine evaluates.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Identifies this call; copied into the response.
    pub uid: String,
    /// Kind of the object.
    #[serde(default)]
    pub kind: GroupVersionKind,
    /// Resource being admitted.
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// Subresource, e.g. `status` or `scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    /// Kind as the client sent it, when the API server converted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    /// Resource as the client addressed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    /// Subresource as the client addressed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    /// Object name; absent for `generateName` creates and deletecollection items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace; for a Namespace object, its own name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The operation.
    pub operation: Operation,
    /// The requesting user.
    #[serde(default)]
    pub user_info: UserInfo,
    /// The new object; absent (JSON `null`) on DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Box<RawValue>>,
    /// The existing object on UPDATE and DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Box<RawValue>>,
    /// True when the request will not be persisted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Create/Update/Delete/Connect options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Box<RawValue>>,
}

impl Request {
    /// `resource` or `resource/subresource`, as used in metrics and messages.
    pub fn resource_label(&self) -> String {
        match self.sub_resource.as_deref() {
            Some(sub) if !sub.is_empty() => format!("{}/{}", self.resource.resource, sub),
            _ => self.resource.resource.clone(),
        }
    }

    /// The subresource, empty when there is none.
    pub fn sub_resource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or("")
    }
}

/// A decoded AdmissionReview: its version and its request.
#[derive(Debug, Clone)]
pub struct Review {
    /// The version to answer in.
    pub version: ReviewVersion,
    /// The request.
    pub request: Request,
}

/// Why a body is not a usable AdmissionReview. Each maps to an HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body is not JSON, or a field has the wrong type.
    #[error("invalid AdmissionReview: {0}")]
    Json(String),
    /// `apiVersion` is not one kadmit speaks.
    #[error(
        "unsupported apiVersion {0:?}: expected admission.k8s.io/v1 or admission.k8s.io/v1beta1"
    )]
    ApiVersion(String),
    /// `kind` is not `AdmissionReview`.
    #[error("unsupported kind {0:?}: expected AdmissionReview")]
    Kind(String),
    /// There is no `request`.
    #[error("invalid AdmissionReview: missing field `request`")]
    MissingRequest,
    /// `request.uid` is empty.
    #[error("invalid AdmissionReview: request.uid is empty")]
    EmptyUid,
}

impl DecodeError {
    /// A short fixed code for metrics labels.
    pub fn reason_code(&self) -> &'static str {
        match self {
            DecodeError::Json(_) => "malformed",
            DecodeError::ApiVersion(_) => "api_version",
            DecodeError::Kind(_) => "kind",
            DecodeError::MissingRequest => "missing_request",
            DecodeError::EmptyUid => "missing_uid",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    request: Option<Request>,
}

/// Decodes an AdmissionReview body.
///
/// Errors name the offending field (`request.operation: unknown variant ...`).
pub fn decode(body: &[u8]) -> Result<Review, DecodeError> {
    // One UTF-8 check of the whole body, then a parser that trusts it: cheaper
    // than `from_slice`, which checks every string on its own (stack notes).
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(describe_json_error(body));
    };
    let envelope: Envelope = match serde_json::from_str(text) {
        Ok(envelope) => envelope,
        // Decode again with path tracking only on the error path: the tracking
        // costs time on every request and is only needed to name the field.
        Err(_) => return Err(describe_json_error(body)),
    };
    let api_version = envelope.api_version.unwrap_or_default();
    let version = ReviewVersion::parse(&api_version).ok_or(DecodeError::ApiVersion(api_version))?;
    let kind = envelope.kind.unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(DecodeError::Kind(kind));
    }
    let request = envelope.request.ok_or(DecodeError::MissingRequest)?;
    if request.uid.is_empty() {
        return Err(DecodeError::EmptyUid);
    }
    Ok(Review { version, request })
}

fn describe_json_error(body: &[u8]) -> DecodeError {
    let mut de = serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize::<_, Envelope>(&mut de) {
        Ok(_) => DecodeError::Json("body is not a single JSON object".to_owned()),
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.into_inner();
            if path == "." || path.is_empty() {
                DecodeError::Json(inner.to_string())
            } else {
                DecodeError::Json(format!("{path}: {inner}"))
            }
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseEnvelope<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusBody<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct StatusBody<'a> {
    status: &'static str,
    code: u16,
    reason: &'a str,
    message: &'a str,
}

/// Encodes the response to `review` in the review's own version.
///
/// The patch, when the verdict has one, is serialized as a JSON Patch array and
/// base64-encoded with `patchType: JSONPatch`; without a patch neither field
/// appears.
pub fn encode(version: ReviewVersion, uid: &str, verdict: &Verdict) -> Vec<u8> {
    let patch = verdict.patch.as_ref().map(encode_patch);
    let envelope = ResponseEnvelope {
        api_version: version.api_version(),
        kind: "AdmissionReview",
        response: Response {
            uid,
            allowed: verdict.allowed,
            status: verdict.denial.as_ref().map(|denial| StatusBody {
                status: "Failure",
                code: denial.code,
                reason: &denial.reason,
                message: &denial.message,
            }),
            warnings: &verdict.warnings,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            audit_annotations: &verdict.audit_annotations,
        },
    };
    // The envelope holds only strings, numbers and maps with string keys.
    serde_json::to_vec(&envelope).unwrap_or_default()
}

/// The patch as a JSON string of its base64-encoded JSON form.
///
/// Written as a raw value: base64 never needs escaping, and serializing it as
/// a string would look at each of its characters for one (about a tenth of a
/// `/mutate` review for a sidecar-sized patch).
fn encode_patch(patch: &json_patch::Patch) -> Box<RawValue> {
    // Serializing a json_patch::Patch cannot fail: it is plain data.
    let json = serde_json::to_vec(patch).unwrap_or_default();
    let mut quoted = String::with_capacity(json.len().div_ceil(3) * 4 + 2);
    quoted.push('"');
    base64::engine::general_purpose::STANDARD.encode_string(&json, &mut quoted);
    quoted.push('"');
    RawValue::from_string(quoted).unwrap_or_else(|_| {
        // Unreachable: a quoted base64 text is a JSON string. Answer with the
        // escaped form rather than fail the review.
        let text = base64::engine::general_purpose::STANDARD.encode(&json);
        serde_json::value::to_raw_value(&text).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(api_version: &str, kind: &str, request: &str) -> Vec<u8> {
        format!(r#"{{"apiVersion":"{api_version}","kind":"{kind}","request":{request}}}"#)
            .into_bytes()
    }

    const REQUEST: &str = r#"{"uid":"u1","kind":{"group":"","version":"v1","kind":"Pod"},
        "resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE",
        "userInfo":{"username":"admin"},"object":{"metadata":{"name":"p"}},"oldObject":null}"#;

    #[test]
    fn decodes_v1_and_keeps_object_raw() {
        let review = decode(&body("admission.k8s.io/v1", "AdmissionReview", REQUEST)).unwrap();
        assert_eq!(review.version, ReviewVersion::V1);
        assert_eq!(review.request.uid, "u1");
        assert_eq!(review.request.operation, Operation::Create);
        assert_eq!(
            review.request.object.as_ref().map(|o| o.get()),
            Some(r#"{"metadata":{"name":"p"}}"#)
        );
        assert!(
            review.request.old_object.is_none(),
            "null oldObject is None"
        );
    }

    #[test]
    fn decodes_v1beta1() {
        let review = decode(&body(
            "admission.k8s.io/v1beta1",
            "AdmissionReview",
            REQUEST,
        ))
        .unwrap();
        assert_eq!(review.version, ReviewVersion::V1Beta1);
    }

    #[test]
    fn rejects_wrong_version_kind_and_missing_parts() {
        let err = decode(&body("admission.k8s.io/v2", "AdmissionReview", REQUEST)).unwrap_err();
        assert!(matches!(err, DecodeError::ApiVersion(v) if v == "admission.k8s.io/v2"));
        let err = decode(&body("admission.k8s.io/v1", "Pod", REQUEST)).unwrap_err();
        assert!(matches!(err, DecodeError::Kind(k) if k == "Pod"));
        let err = decode(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
            .unwrap_err();
        assert!(matches!(err, DecodeError::MissingRequest));
    }

    #[test]
    fn names_the_bad_field() {
        let request = REQUEST.replace("\"CREATE\"", "\"EXPLODE\"");
        let err = decode(&body("admission.k8s.io/v1", "AdmissionReview", &request)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("request.operation"), "{text}");
        assert!(text.contains("EXPLODE"), "{text}");

        let request = REQUEST.replace(r#""uid":"u1","#, "");
        let err = decode(&body("admission.k8s.io/v1", "AdmissionReview", &request)).unwrap_err();
        assert!(err.to_string().contains("uid"), "{err}");

        let err = decode(b"{not json").unwrap_err();
        assert!(matches!(err, DecodeError::Json(_)));
    }

    #[test]
    fn encodes_in_the_callers_version_without_empty_fields() {
        let verdict = Verdict::allow();
        let bytes = encode(ReviewVersion::V1Beta1, "abc", &verdict);
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                "response": {"uid": "abc", "allowed": true}})
        );
    }
}
