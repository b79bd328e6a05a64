//! The AdmissionReview wire format: decoding a review into a [`Request`] and encoding a
//! [`Response`] to it, in the API version the caller used.
//!
//! No policy logic lives here. The object and old object are most of the body
//! and parsing them is most of the cost, so the decoder asks, when it reaches
//! them, whether a rule will read them: if so they are parsed right there, in
//! the one pass over the body; if not they are only skipped and kept as raw
//! JSON ([`RawValue`]). kube-apiserver writes `object` after every field a
//! rule's request-level criteria look at (Go marshals fields in declaration
//! order); with another order the decision is made on what came before, and
//! only the cost depends on it, never the verdict.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::plan::projection::{ObjectProjections, Projection};

mod direct;

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
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    Serialize,
    schemars::JsonSchema,
)]
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

/// `object` or `oldObject` of a request, as decoded.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Embedded {
    /// Skipped while decoding: no rule was going to read it.
    Raw(Box<RawValue>),
    /// Parsed while decoding.
    Parsed(Value),
}

impl Embedded {
    /// The document as a JSON value: parsed now if it was kept raw.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Embedded::Raw(raw) => serde_json::from_str(raw.get()),
            Embedded::Parsed(value) => Ok(value.clone()),
        }
    }

    /// Like [`Embedded::to_value`], without a copy of a parsed document.
    pub fn into_value(self) -> Result<Value, serde_json::Error> {
        match self {
            Embedded::Raw(raw) => serde_json::from_str(raw.get()),
            Embedded::Parsed(value) => Ok(value),
        }
    }

    /// Reads the document into `T`.
    pub fn deserialize_into<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match self {
            Embedded::Raw(raw) => serde_json::from_str(raw.get()),
            Embedded::Parsed(value) => T::deserialize(value),
        }
    }
}

impl From<Value> for Embedded {
    fn from(value: Value) -> Self {
        Embedded::Parsed(value)
    }
}

/// The `request` of an AdmissionReview: everything the engine evaluates.
#[derive(Debug, Clone, Serialize)]
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
    pub object: Option<Embedded>,
    /// The existing object on UPDATE and DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Embedded>,
    /// True when the request will not be persisted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Create/Update/Delete/Connect options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Box<RawValue>>,
}

impl Request {
    /// A request with only a uid and an operation, the rest empty.
    pub fn new(uid: impl Into<String>, operation: Operation) -> Self {
        Request {
            uid: uid.into(),
            kind: GroupVersionKind::default(),
            resource: GroupVersionResource::default(),
            sub_resource: None,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: None,
            namespace: None,
            operation,
            user_info: UserInfo::default(),
            object: None,
            old_object: None,
            dry_run: None,
            options: None,
        }
    }

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

/// What the decoder does with `object` and `oldObject`.
#[derive(Debug, Clone, Copy)]
pub enum ObjectParse<'p> {
    /// Skip them and keep them as raw JSON: no rule reads them.
    Raw,
    /// Parse them whole.
    Full,
    /// Parse only what the rules can read of each (`Plan::projections`),
    /// skipping the rest as it is read.
    Projected(&'p ObjectProjections),
}

/// Decodes a request, asking `parse_objects` (once, on reaching `object` or
/// `oldObject`) how to treat them.
struct RequestSeed<'w, 'p> {
    parse_objects: &'w mut dyn FnMut(&Request) -> ObjectParse<'p>,
}

impl<'de> DeserializeSeed<'de> for RequestSeed<'_, '_> {
    type Value = Decoded;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Decoded, D::Error> {
        deserializer.deserialize_map(self)
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "camelCase")]
enum RequestField {
    Uid,
    Kind,
    Resource,
    SubResource,
    RequestKind,
    RequestResource,
    RequestSubResource,
    Name,
    Namespace,
    Operation,
    UserInfo,
    Object,
    OldObject,
    DryRun,
    Options,
    #[serde(other)]
    Other,
}

impl RequestField {
    fn name(&self) -> &'static str {
        match self {
            RequestField::Uid => "uid",
            RequestField::Kind => "kind",
            RequestField::Resource => "resource",
            RequestField::SubResource => "subResource",
            RequestField::RequestKind => "requestKind",
            RequestField::RequestResource => "requestResource",
            RequestField::RequestSubResource => "requestSubResource",
            RequestField::Name => "name",
            RequestField::Namespace => "namespace",
            RequestField::Operation => "operation",
            RequestField::UserInfo => "userInfo",
            RequestField::Object => "object",
            RequestField::OldObject => "oldObject",
            RequestField::DryRun => "dryRun",
            RequestField::Options => "options",
            RequestField::Other => "",
        }
    }
}

/// A decoded request, and whether `parse_objects` was asked before the
/// request's other fields were all read.
struct Decoded {
    request: Request,
    asked_early: bool,
}

impl RequestField {
    /// True for the fields request-level criteria read.
    fn selects(self) -> bool {
        !matches!(
            self,
            RequestField::Uid
                | RequestField::Object
                | RequestField::OldObject
                | RequestField::DryRun
                | RequestField::Options
                | RequestField::Other
        )
    }
}

impl<'de> Visitor<'de> for RequestSeed<'_, '_> {
    type Value = Decoded;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionRequest object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let mut request = Request::new(String::new(), Operation::Create);
        let mut seen = 0u32;
        let mut parse_objects: Option<ObjectParse> = None;
        let mut asked_early = false;
        while let Some(field) = map.next_key::<RequestField>()? {
            asked_early |= parse_objects.is_some() && field.selects();
            if field != RequestField::Other {
                let bit = 1 << (field as u32);
                if seen & bit != 0 {
                    return Err(de::Error::duplicate_field(field.name()));
                }
                seen |= bit;
            }
            match field {
                RequestField::Uid => request.uid = map.next_value()?,
                RequestField::Kind => request.kind = map.next_value()?,
                RequestField::Resource => request.resource = map.next_value()?,
                RequestField::SubResource => request.sub_resource = map.next_value()?,
                RequestField::RequestKind => request.request_kind = map.next_value()?,
                RequestField::RequestResource => request.request_resource = map.next_value()?,
                RequestField::RequestSubResource => {
                    request.request_sub_resource = map.next_value()?
                }
                RequestField::Name => request.name = map.next_value()?,
                RequestField::Namespace => request.namespace = map.next_value()?,
                RequestField::Operation => request.operation = map.next_value()?,
                RequestField::UserInfo => request.user_info = map.next_value()?,
                RequestField::Object | RequestField::OldObject => {
                    let parse = *parse_objects.get_or_insert_with(|| {
                        objects_parse(&request, seen, &mut *self.parse_objects)
                    });
                    let value = match parse {
                        ObjectParse::Raw => map
                            .next_value::<Option<Box<RawValue>>>()?
                            .map(Embedded::Raw),
                        ObjectParse::Full => {
                            map.next_value::<Option<Value>>()?.map(Embedded::Parsed)
                        }
                        ObjectParse::Projected(projections) => {
                            let projection = if field == RequestField::Object {
                                &projections.object
                            } else {
                                &projections.old_object
                            };
                            match map.next_value_seed(ProjectedSeed(projection))? {
                                Value::Null => None,
                                value => Some(Embedded::Parsed(value)),
                            }
                        }
                    };
                    if field == RequestField::Object {
                        request.object = value;
                    } else {
                        request.old_object = value;
                    }
                }
                RequestField::DryRun => request.dry_run = map.next_value()?,
                RequestField::Options => request.options = map.next_value()?,
                RequestField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        for required in [RequestField::Uid, RequestField::Operation] {
            if seen & (1 << (required as u32)) == 0 {
                return Err(de::Error::missing_field(required.name()));
            }
        }
        Ok(Decoded {
            request,
            asked_early,
        })
    }
}

/// How to treat the objects, asked once, on reaching the first, of the
/// request read so far (`seen`: its fields' bits): raw while the operation
/// is not known, since rules cannot be selected without it.
fn objects_parse<'p>(
    request: &Request,
    seen: u32,
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> ObjectParse<'p> {
    if seen & (1 << (RequestField::Operation as u32)) != 0 {
        parse_objects(request)
    } else {
        ObjectParse::Raw
    }
}

/// Parses a JSON value as [`Value`] does, except that an object's
/// `metadata.managedFields` is left out: `kadmit audit` reads listed
/// objects so when no rule can reach that field
/// (`Plan::reads_managed_fields`), since it is often half of an object.
pub fn without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Value, D::Error> {
    WithoutManagedFields { metadata: false }.deserialize(deserializer)
}

/// The visitor methods of a value kept as it is: null and the scalars, as
/// [`Value`] parses them.
macro_rules! visit_scalars_as_values {
    () => {
        fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }
    };
}

/// Parses a value as `Value` does, except that in a map it parses
/// `metadata` leaving out `managedFields` (`metadata` set: this map is the
/// metadata).
struct WithoutManagedFields {
    metadata: bool,
}

impl<'de> DeserializeSeed<'de> for WithoutManagedFields {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for WithoutManagedFields {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object or null")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if self.metadata && key == "managedFields" {
                map.next_value::<IgnoredAny>()?;
                continue;
            } else if !self.metadata && key == "metadata" {
                map.next_value_seed(WithoutManagedFields { metadata: true })?
            } else {
                map.next_value::<Value>()?
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(element) = seq.next_element::<Value>()? {
            out.push(element);
        }
        Ok(Value::Array(out))
    }

    // Anything but a map is kept as it is.
    visit_scalars_as_values!();
}

/// A value parsed as far as a [`Projection`] keeps it: all of it when the
/// projection is whole; otherwise a map with only the members it names, a
/// list with each element projected (skipped ones as nulls, so that
/// indices stay), a scalar as it is. What is skipped is still checked to be
/// JSON.
struct ProjectedSeed<'p>(&'p Projection);

impl<'de> DeserializeSeed<'de> for ProjectedSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if self.0.is_whole() {
            Value::deserialize(deserializer)
        } else {
            deserializer.deserialize_any(self)
        }
    }
}

impl<'de> Visitor<'de> for ProjectedSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(MemberName(key)) = map.next_key()? {
            match self.0.member(&key) {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(projection) => {
                    let value = map.next_value_seed(ProjectedSeed(projection))?;
                    out.insert(key.into_owned(), value);
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let element = self.0.element();
        let mut out = Vec::new();
        if let Projection::Nothing = element {
            while seq.next_element::<IgnoredAny>()?.is_some() {
                out.push(Value::Null);
            }
        } else {
            while let Some(value) = seq.next_element_seed(ProjectedSeed(element))? {
                out.push(value);
            }
        }
        Ok(Value::Array(out))
    }

    visit_scalars_as_values!();
}

/// A member name, borrowed from the body when it holds no escape: most
/// names a projection skips are never copied.
struct MemberName<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;

        impl<'de> Visitor<'de> for NameVisitor {
            type Value = MemberName<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MemberName(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MemberName(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(MemberName(Cow::Owned(v)))
            }
        }

        deserializer.deserialize_str(NameVisitor)
    }
}

/// The most memory the request path may take to hold the JSON of one
/// review's objects once parsed, as [`parsed_size_estimate`] reckons it.
/// Parsed, JSON takes up to about 84 times its size (`[{"":0},...]`: each
/// one-key map is a 640-byte tree node), so a 16 MiB body could take
/// 1.4 GB; a review over this is answered 413 before it is parsed.
pub const MAX_PARSED_BYTES: usize = 64 << 20;

/// The most memory the threads that keep copies of answered reviews (the
/// shadow ring, `serve --record`) may take to parse one to redact it; a
/// review over it is not kept (counted: the shadow ring's `dropped`, the
/// recording's `failed`).
pub const MAX_KEPT_PARSED_BYTES: usize = 16 << 20;

/// What a map costs once parsed, at most: a `Value` and the first node of
/// its tree (eleven keys and values).
const PARSED_MAP_BYTES: usize = 672;
/// What a list costs once parsed, at most: a `Value` and its first four
/// slots.
const PARSED_LIST_BYTES: usize = 160;
/// What each further value (after `,` or `:`) costs at most, beside its
/// text.
const PARSED_VALUE_BYTES: usize = 64;
/// No JSON takes more than this many times its size once parsed (the
/// one-key maps above, at 8 bytes each); bodies this much under a bound
/// need no estimate.
pub const PARSED_GROWTH: usize = 100;

/// An upper bound of the memory `json` takes parsed into [`Value`]s,
/// counted from its text in one pass (strings skipped): its bytes, plus
/// [`PARSED_MAP_BYTES`] per map, [`PARSED_LIST_BYTES`] per list and
/// [`PARSED_VALUE_BYTES`] per further member or element. Not JSON is
/// estimated all the same; the parse then says what is wrong.
pub fn parsed_size_estimate(json: &[u8]) -> usize {
    let mut estimate = json.len();
    let mut in_string = false;
    let mut escaped = false;
    for &byte in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        estimate = estimate.saturating_add(match byte {
            b'"' => {
                in_string = true;
                0
            }
            b'{' => PARSED_MAP_BYTES,
            b'[' => PARSED_LIST_BYTES,
            b',' | b':' => PARSED_VALUE_BYTES,
            _ => 0,
        });
    }
    estimate
}

/// An upper bound of the memory `value` takes, counted as
/// [`parsed_size_estimate`] counts the text it was parsed from: its
/// strings and keys, plus the same costs per map, list and member.
pub fn parsed_size(value: &Value) -> usize {
    let mut size = 0usize;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        let here = match value {
            Value::Object(map) => {
                pending.extend(map.values());
                map.keys().fold(PARSED_MAP_BYTES, |sum, key| {
                    sum.saturating_add(key.len() + 2 * PARSED_VALUE_BYTES)
                })
            }
            Value::Array(list) => {
                pending.extend(list);
                PARSED_LIST_BYTES.saturating_add(list.len().saturating_mul(PARSED_VALUE_BYTES))
            }
            Value::String(text) => text.len(),
            Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        };
        size = size.saturating_add(here);
    }
    size
}

/// Whether `json` may take more than `limit` bytes once parsed: the
/// estimate, only for bodies large enough to get there.
pub fn may_parse_over(json: &[u8], limit: usize) -> bool {
    json.len().saturating_mul(PARSED_GROWTH) > limit && parsed_size_estimate(json) > limit
}

/// [`parsed_size_estimate`] of `json`, an AdmissionReview, without its
/// request's `object` and `oldObject`: what decoding it with its objects
/// kept raw can build (the user's groups and extra, the other strings).
/// `None` when it is not a JSON object with a `request` object, read with
/// [`crate::json::Cursor`] (any depth, nothing built).
pub fn parsed_size_estimate_outside_objects(json: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(json).ok()?;
    let mut cursor = crate::json::Cursor::new(text);
    let mut inside = 0usize;
    if cursor.open(b'{', b'}').ok()? {
        loop {
            let key = cursor.key().ok()?;
            if key == "request" {
                cursor.skip_whitespace();
                if cursor.peek() == Some(b'{') && cursor.open(b'{', b'}').ok()? {
                    loop {
                        let member = cursor.key().ok()?;
                        cursor.skip_whitespace();
                        let start = cursor.at();
                        cursor.skip_value().ok()?;
                        if member == "object" || member == "oldObject" {
                            let value = text.get(start..cursor.at())?;
                            inside = inside.saturating_add(parsed_size_estimate(value.as_bytes()));
                        }
                        if !cursor.next_member(b'}').ok()? {
                            break;
                        }
                    }
                } else {
                    cursor.skip_value().ok()?;
                }
            } else {
                cursor.skip_value().ok()?;
            }
            if !cursor.next_member(b'}').ok()? {
                break;
            }
        }
    }
    Some(parsed_size_estimate(json).saturating_sub(inside))
}

/// The annotation `kubectl apply` keeps the applied manifest in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops from an AdmissionReview what a copy kept after the answer must not
/// hold (`serve --record`, the reviews a reload is shadowed with):
/// `metadata.managedFields` of `object` and `oldObject`, and of a Secret
/// the values of `data` and `stringData` (each replaced by `""`, keys kept)
/// and the manifest `kubectl apply` keeps in an annotation.
pub fn redact(review: &mut Value) {
    // A Secret by the request's kind or resource, or by the object's kind.
    let request_names_a_secret = names_a_secret(
        review.pointer("/request/kind/kind").and_then(Value::as_str),
        review
            .pointer("/request/resource/resource")
            .and_then(Value::as_str),
    );
    for side in ["object", "oldObject"] {
        let Some(object) = review
            .pointer_mut(&format!("/request/{side}"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let secret =
            request_names_a_secret || object.get("kind").and_then(Value::as_str) == Some("Secret");
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
            // `kubectl apply` keeps the whole manifest it applied here,
            // the Secret's values included.
            if secret
                && let Some(annotations) = metadata
                    .get_mut("annotations")
                    .and_then(Value::as_object_mut)
            {
                annotations.remove(LAST_APPLIED);
            }
        }
        if secret {
            for field in ["data", "stringData"] {
                match object.get_mut(field) {
                    Some(Value::Object(values)) => {
                        for value in values.values_mut() {
                            *value = Value::String(String::new());
                        }
                    }
                    Some(other) => *other = Value::Null,
                    None => {}
                }
            }
        }
    }
}

/// Whether a request of `kind` on `resource` is of a Secret, whose values
/// [`redact`] blanks.
fn names_a_secret(kind: Option<&str>, resource: Option<&str>) -> bool {
    kind == Some("Secret") || resource == Some("secrets")
}

/// What [`redact`] leaves out of, or blanks in, the objects of a review
/// of `request`, as member names from an object's root: a recorded or
/// shadowed review judged by rules that read one of these is judged on
/// what the API server never sent.
pub fn redacted_places(request: &Request) -> Vec<&'static [&'static str]> {
    let mut places: Vec<&'static [&'static str]> = vec![&["metadata", "managedFields"]];
    if names_a_secret(Some(&request.kind.kind), Some(&request.resource.resource)) {
        places.extend([
            &["data"][..],
            &["stringData"][..],
            &["metadata", "annotations", LAST_APPLIED][..],
        ]);
    }
    places
}

/// A decoded AdmissionReview: its version and its request.
#[derive(Debug, Clone)]
pub struct Review {
    /// The version to answer in.
    pub version: ReviewVersion,
    /// The request.
    pub request: Request,
    /// True when `object` or `oldObject` came before a field that
    /// request-level criteria read (operation, resource, namespace, user...),
    /// so the decoder asked how to treat them on part of the request.
    /// kube-apiserver never writes them in that order.
    pub objects_came_early: bool,
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

struct Envelope {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<Decoded>,
}

/// The envelope with its request decoded by a [`RequestSeed`].
struct EnvelopeSeed<'w, 'p> {
    parse_objects: &'w mut dyn FnMut(&Request) -> ObjectParse<'p>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "camelCase")]
enum EnvelopeField {
    ApiVersion,
    Kind,
    Request,
    #[serde(other)]
    Other,
}

impl<'de> DeserializeSeed<'de> for EnvelopeSeed<'_, '_> {
    type Value = Envelope;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Envelope, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeSeed<'_, '_> {
    type Value = Envelope;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionReview object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut envelope = Envelope {
            api_version: None,
            kind: None,
            request: None,
        };
        // A field given twice is refused, as in `request`: with two
        // `request`s, the first's rule selection (made as its objects were
        // reached) would have judged the second.
        let mut seen = [false; 3];
        while let Some(field) = map.next_key::<EnvelopeField>()? {
            let (slot, name) = match field {
                EnvelopeField::ApiVersion => (0, "apiVersion"),
                EnvelopeField::Kind => (1, "kind"),
                EnvelopeField::Request => (2, "request"),
                EnvelopeField::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[slot], true) {
                return Err(de::Error::duplicate_field(name));
            }
            match field {
                EnvelopeField::ApiVersion => envelope.api_version = map.next_value()?,
                EnvelopeField::Kind => envelope.kind = map.next_value()?,
                EnvelopeField::Request => {
                    envelope.request = map.next_value_seed(OptionalRequest(RequestSeed {
                        parse_objects: &mut *self.parse_objects,
                    }))?
                }
                EnvelopeField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(envelope)
    }
}

/// `request`, which may be `null`.
struct OptionalRequest<'w, 'p>(RequestSeed<'w, 'p>);

impl<'de> DeserializeSeed<'de> for OptionalRequest<'_, '_> {
    type Value = Option<Decoded>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptionalRequest<'_, '_> {
    type Value = Option<Decoded>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionRequest object or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(deserializer).map(Some)
    }
}

/// Decodes an AdmissionReview body, keeping `object` and `oldObject` raw.
///
/// Errors name the offending field (`request.operation: unknown variant ...`).
pub fn decode(body: &[u8]) -> Result<Review, DecodeError> {
    decode_with(body, &mut |_| ObjectParse::Raw)
}

/// Decodes an AdmissionReview body, treating `object` and `oldObject` as
/// `parse_objects` says when it sees the request decoded up to them.
pub fn decode_with<'p>(
    body: &[u8],
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> Result<Review, DecodeError> {
    // One UTF-8 check of the whole body, then a parser that trusts it: cheaper
    // than `from_slice`, which checks every string on its own (about 23 %
    // slower on a 6.6 KB review).
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(describe_json_error(body, parse_objects));
    };
    match direct::envelope(text, parse_objects) {
        Some(envelope) => checked(envelope),
        None => decode_text_with_serde_json(text, parse_objects),
    }
}

/// [`decode_with`] through serde_json alone: what it falls back to when
/// the direct reading leaves a body to serde_json, and the reference the
/// direct reading is held to (its tests, the review fuzz target).
pub fn decode_with_serde_json<'p>(
    body: &[u8],
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> Result<Review, DecodeError> {
    match std::str::from_utf8(body) {
        Ok(text) => decode_text_with_serde_json(text, parse_objects),
        Err(_) => Err(describe_json_error(body, parse_objects)),
    }
}

// Out of line and cold: reviews the direct reading takes never come here,
// and inlined into `decode_with` this path would spread the hot one over
// more of the instruction cache.
#[cold]
#[inline(never)]
fn decode_text_with_serde_json<'p>(
    text: &str,
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> Result<Review, DecodeError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let decoded = EnvelopeSeed {
        parse_objects: &mut *parse_objects,
    }
    .deserialize(&mut deserializer)
    .and_then(|envelope| deserializer.end().map(|()| envelope));
    match decoded {
        Ok(envelope) => checked(envelope),
        // Decode again with path tracking only on the error path: the tracking
        // costs time on every request and is only needed to name the field.
        Err(_) => Err(describe_json_error(text.as_bytes(), parse_objects)),
    }
}

/// The review of a decoded envelope, if it is one kadmit answers.
fn checked(envelope: Envelope) -> Result<Review, DecodeError> {
    let api_version = envelope.api_version.unwrap_or_default();
    let version = ReviewVersion::parse(&api_version).ok_or(DecodeError::ApiVersion(api_version))?;
    let kind = envelope.kind.unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(DecodeError::Kind(kind));
    }
    let Decoded {
        request,
        asked_early,
    } = envelope.request.ok_or(DecodeError::MissingRequest)?;
    if request.uid.is_empty() {
        return Err(DecodeError::EmptyUid);
    }
    Ok(Review {
        version,
        request,
        objects_came_early: asked_early,
    })
}

/// Decodes `body` again, the same way, tracking the path to name the field
/// that failed: the tracking costs time on every request, so only the error
/// path pays for it.
#[cold]
#[inline(never)]
fn describe_json_error<'p>(
    body: &[u8],
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> DecodeError {
    // `from_slice` also reports a string that is not UTF-8, with its place.
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut track = serde_path_to_error::Track::new();
    let decoded = EnvelopeSeed { parse_objects }
        .deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track));
    let error = match decoded.and_then(|_| de.end()) {
        Ok(()) => return DecodeError::Json("body is not UTF-8 JSON".to_owned()),
        Err(error) => error,
    };
    let path = track.path().to_string();
    if path == "." || path.is_empty() {
        DecodeError::Json(error.to_string())
    } else {
        DecodeError::Json(format!("{path}: {error}"))
    }
}

/// The `status` of a denied review's response. Not k8s-openapi's `Status`
/// (which the error answers use): the AdmissionReview response is written
/// on the request path by [`encode`] without building an owned object, and
/// the AdmissionReview types themselves are not in k8s-openapi.
#[derive(Serialize)]
struct StatusBody<'a> {
    status: &'static str,
    code: u16,
    reason: &'a str,
    message: &'a str,
}

/// What the response to a review says: the engine's verdict as the
/// AdmissionReview wire format carries it.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a> {
    /// Whether the API server may go on.
    pub allowed: bool,
    /// The status of a denial.
    pub denial: Option<DenialStatus<'a>>,
    /// Warnings shown to the client.
    pub warnings: &'a [String],
    /// A JSON Patch for the object (mutating webhooks only).
    pub patch: Option<&'a crate::patch::Patch>,
    /// `auditAnnotations`.
    pub audit_annotations: &'a BTreeMap<String, String>,
}

/// The `status` of a denied review's response.
#[derive(Debug, Clone, Copy)]
pub struct DenialStatus<'a> {
    /// HTTP-style code.
    pub code: u16,
    /// Kubernetes `StatusReason` for the code.
    pub reason: &'a str,
    /// What was denied and why.
    pub message: &'a str,
}

/// Encodes `response` to the review `uid` in the review's own `version`.
///
/// The patch, when the response has one, is serialized as a JSON Patch array and
/// base64-encoded with `patchType: JSONPatch`; without a patch neither field
/// appears. Fields that can hold any text go through serde_json for their
/// escaping; the fixed parts and the base64 text (which never needs escaping)
/// are written as they are.
pub fn encode(version: ReviewVersion, uid: &str, response: &Response<'_>) -> Vec<u8> {
    let patch = response.patch.map(patch_json);
    let patch_len = patch.as_ref().map_or(0, |json| json.len().div_ceil(3) * 4);
    let mut out = Vec::with_capacity(256 + patch_len);
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(version.api_version().as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
    write_json(&mut out, uid);
    out.extend_from_slice(if response.allowed {
        b",\"allowed\":true"
    } else {
        b",\"allowed\":false"
    });
    if let Some(denial) = &response.denial {
        out.extend_from_slice(b",\"status\":");
        let status = StatusBody {
            status: "Failure",
            code: denial.code,
            reason: denial.reason,
            message: denial.message,
        };
        write_json(&mut out, &status);
    }
    if !response.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":");
        write_json(&mut out, &response.warnings);
    }
    if let Some(json) = patch {
        out.extend_from_slice(b",\"patchType\":\"JSONPatch\",\"patch\":\"");
        let start = out.len();
        out.resize(start + patch_len, 0);
        let engine = base64::engine::general_purpose::STANDARD;
        match engine.encode_slice(&json, &mut out[start..]) {
            Ok(written) => out.truncate(start + written),
            // Unreachable: the space is what base64 needs. Encode again
            // rather than answer with a wrong patch.
            Err(_) => {
                out.truncate(start);
                out.extend_from_slice(engine.encode(&json).as_bytes());
            }
        }
        out.push(b'"');
    }
    if !response.audit_annotations.is_empty() {
        out.extend_from_slice(b",\"auditAnnotations\":");
        write_json(&mut out, &response.audit_annotations);
    }
    out.extend_from_slice(b"}}");
    out
}

/// Appends `value` as JSON. Writing plain data to a `Vec` cannot fail.
fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(out, value);
}

/// The patch as a JSON array, the form the API server decodes from base64.
/// Each location's pointer is written straight from its tokens; a pointer
/// whose keys need JSON escaping goes through serde_json.
fn patch_json(patch: &crate::patch::Patch) -> Vec<u8> {
    // Room for each operation's fixed text, a pointer of a dozen bytes a
    // token and its value, so the array is written without growing.
    let room: usize = patch
        .0
        .iter()
        .map(|operation| 40 + 12 * operation.location.len() + operation.value_json.len())
        .sum();
    let mut json = Vec::with_capacity(2 + room);
    json.push(b'[');
    for (i, operation) in patch.0.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        json.extend_from_slice(b"{\"op\":\"");
        json.extend_from_slice(operation.op.as_str().as_bytes());
        json.extend_from_slice(b"\",\"path\":\"");
        let start = json.len();
        crate::patch::write_pointer(&mut json, &operation.location);
        if json[start..].iter().any(|&byte| needs_json_escape(byte)) {
            // Rare: a key with a quote, a backslash or a control character.
            let pointer = crate::patch::pointer(&operation.location);
            json.truncate(start - 1);
            write_json(&mut json, pointer.as_str());
        } else {
            json.push(b'"');
        }
        json.extend_from_slice(b",\"value\":");
        json.extend_from_slice(operation.value_json.as_bytes());
        json.push(b'}');
    }
    json.push(b']');
    json
}

/// Whether a byte of a JSON string must be escaped: a quote, a backslash or
/// a control character.
fn needs_json_escape(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// The captured review bodies under `tests/fixtures/admission-reviews`,
/// by file name, in name order.
#[cfg(test)]
pub(crate) fn fixture_bodies() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/admission-reviews"
    );
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name, body)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(api_version: &str, kind: &str, request: &str) -> Vec<u8> {
        format!(r#"{{"apiVersion":"{api_version}","kind":"{kind}","request":{request}}}"#)
            .into_bytes()
    }

    #[test]
    fn the_estimate_outside_the_objects_leaves_out_only_the_objects() {
        let maps = vec![r#"{"":0}"#; 10_000].join(",");
        let review = |object: &str, groups: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","userInfo":{{"username":"a","groups":[{groups}]}},"object":{object},"oldObject":{object}}}}}"#
            )
        };
        // Small maps in both objects: the whole is large, the rest small.
        let text = review(&format!("[{maps}]"), r#""a""#);
        let whole = parsed_size_estimate(text.as_bytes());
        let rest = parsed_size_estimate_outside_objects(text.as_bytes()).unwrap();
        assert!(whole > 2 * 10_000 * PARSED_MAP_BYTES, "{whole}");
        assert!(rest < 10_000, "{rest}");
        // Groups outside the objects count.
        let groups = vec![r#""""#; 10_000].join(",");
        let text = review("null", &groups);
        let rest = parsed_size_estimate_outside_objects(text.as_bytes()).unwrap();
        // (All of it but the two `null`s.)
        assert_eq!(rest + 8, parsed_size_estimate(text.as_bytes()));
        assert!(rest > 10_000 * PARSED_VALUE_BYTES, "{rest}");
        // Anything else is not read as a review.
        for broken in ["[]", "{\"request\": {\"object\": }", "{\"a\": 1,}"] {
            assert_eq!(
                parsed_size_estimate_outside_objects(broken.as_bytes()),
                None,
                "{broken}"
            );
        }
        // Nested past any recursion limit, read in constant stack.
        let deep = review(
            &format!("{}{}", "[".repeat(1 << 20), "]".repeat(1 << 20)),
            "",
        );
        assert!(parsed_size_estimate_outside_objects(deep.as_bytes()).unwrap() < 10_000);
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
        let Some(Embedded::Raw(object)) = &review.request.object else {
            panic!("object not kept raw: {:?}", review.request.object);
        };
        assert_eq!(object.get(), r#"{"metadata":{"name":"p"}}"#);
        assert!(
            review.request.old_object.is_none(),
            "null oldObject is None"
        );
    }

    #[test]
    fn parses_the_objects_in_the_same_pass_when_asked() {
        let asked = std::cell::RefCell::new(Vec::new());
        let mut parse = |request: &Request| {
            asked
                .borrow_mut()
                .push((request.operation, request.resource.resource.clone()));
            ObjectParse::Full
        };
        let request = REQUEST.replace(
            r#""oldObject":null"#,
            r#""oldObject":{"metadata":{"name":"old"}}"#,
        );
        let review = decode_with(
            &body("admission.k8s.io/v1", "AdmissionReview", &request),
            &mut parse,
        )
        .unwrap();
        assert!(matches!(
            &review.request.object,
            Some(Embedded::Parsed(object)) if object["metadata"]["name"] == "p"
        ));
        assert!(matches!(
            &review.request.old_object,
            Some(Embedded::Parsed(object)) if object["metadata"]["name"] == "old"
        ));
        // Asked once, with the fields that came before the object, which
        // were all of them.
        assert_eq!(*asked.borrow(), [(Operation::Create, "pods".to_owned())]);
        assert!(!review.objects_came_early);

        // Told no: kept raw.
        let review = decode_with(
            &body("admission.k8s.io/v1", "AdmissionReview", &request),
            &mut |_| ObjectParse::Raw,
        )
        .unwrap();
        assert!(matches!(review.request.object, Some(Embedded::Raw(_))));
    }

    #[test]
    fn says_when_the_objects_came_before_a_field_criteria_read() {
        // `namespace` after the object: the question was asked without it.
        let request = REQUEST.replace(
            r#""oldObject":null}"#,
            r#""oldObject":null,"namespace":"late","dryRun":true}"#,
        );
        let review = decode_with(
            &body("admission.k8s.io/v1", "AdmissionReview", &request),
            &mut |request| {
                assert_eq!(request.namespace, None);
                ObjectParse::Raw
            },
        )
        .unwrap();
        assert!(review.objects_came_early);
        assert_eq!(review.request.namespace.as_deref(), Some("late"));
        // `dryRun` and `options` after the objects are the usual order.
        let request = REQUEST.replace(r#""oldObject":null}"#, r#""oldObject":null,"dryRun":true}"#);
        let review = decode_with(
            &body("admission.k8s.io/v1", "AdmissionReview", &request),
            &mut |_| ObjectParse::Raw,
        )
        .unwrap();
        assert!(!review.objects_came_early);
    }

    /// The review `{..., "object": OBJECT}` decoded with `projections`.
    fn decode_projected(object: &str, projections: &ObjectProjections) -> Result<Value, String> {
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","operation":"CREATE","object":{object}}}}}"#
        );
        let review = decode_with(body.as_bytes(), &mut |_| {
            ObjectParse::Projected(projections)
        })
        .map_err(|e| e.to_string())?;
        Ok(match review.request.object {
            Some(Embedded::Parsed(value)) => value,
            other => panic!("not parsed: {other:?}"),
        })
    }

    fn projections_of(paths: &[&str]) -> crate::plan::KindProjections {
        crate::plan::KindProjections::build(|projections| {
            for text in paths {
                let path =
                    crate::plan::JsonPath::compile(text, crate::plan::PathScope::DOCUMENT).unwrap();
                projections.add_path(&path, &[]);
            }
        })
    }

    #[test]
    fn objects_parsed_projected_keep_what_is_read_and_the_shape_around_it() {
        let projections = projections_of(&["$.object.spec.containers[*].image"]);
        let projections = projections.of_kind("");
        let object = r#"{"kind":"Pod","metadata":{"name":"p","labels":{"a":"b"}},
            "spec":{"containers":[{"name":"a","image":"x","env":[{"name":"E"}]},7,null],
                    "tolerations":[{"key":"k"}],"volumes":"weird"},
            "status":{}}"#;
        assert_eq!(
            decode_projected(object, projections).unwrap(),
            serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"image": "x"}, 7, null]},
            })
        );
        // Escaped member names are matched by what they say.
        let escaped = r#"{"sp\u0065c":{"containers":[{"im\u0061ge":"y"}]}}"#;
        assert_eq!(
            decode_projected(escaped, projections).unwrap(),
            serde_json::json!({"spec": {"containers": [{"image": "y"}]}})
        );
        // A list under a member read only by name keeps its length.
        let names = projections_of(&["$.object.spec.list.name"]);
        let list = r#"{"spec":{"list":[1,{"name":"n"},[2]]}}"#;
        assert_eq!(
            decode_projected(list, names.of_kind("")).unwrap(),
            serde_json::json!({"spec": {"list": [null, null, null]}})
        );
    }

    #[test]
    fn parts_no_rule_reads_are_skipped_however_deep_and_read_parts_keep_the_depth_bound() {
        let projections = projections_of(&["$.object.spec.read"]);
        let projections = projections.of_kind("");
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        // Skipped without recursion, so without serde_json's 128 levels.
        let unread = format!(r#"{{"spec":{{"other":{}, "read":1}}}}"#, deep(100_000));
        assert_eq!(
            decode_projected(&unread, projections).unwrap(),
            serde_json::json!({"spec": {"read": 1}})
        );
        let read = format!(r#"{{"spec":{{"read":{}}}}}"#, deep(200));
        let error = decode_projected(&read, projections).unwrap_err();
        assert!(error.contains("recursion limit exceeded"), "{error}");
        // Still checked as JSON where skipped.
        let broken = r#"{"spec":{"other":[1,}, "read":1}}"#;
        assert!(decode_projected(broken, projections).is_err());
    }

    /// `text` parsed as `kadmit audit` parses a listed object.
    fn lean(text: &str) -> Value {
        without_managed_fields(&mut serde_json::Deserializer::from_str(text)).unwrap()
    }

    #[test]
    fn objects_parsed_without_managed_fields_lose_nothing_else() {
        let mut checked = 0;
        for (path, body) in fixture_bodies() {
            let whole = decode_with(&body, &mut |_| ObjectParse::Full).unwrap();
            let raw = decode(&body).unwrap();
            for (whole, raw) in [
                (&whole.request.object, &raw.request.object),
                (&whole.request.old_object, &raw.request.old_object),
            ] {
                let whole = whole.as_ref().map(|o| o.to_value().unwrap());
                let lean = raw.as_ref().map(|raw| match raw {
                    Embedded::Raw(raw) => lean(raw.get()),
                    Embedded::Parsed(_) => panic!("{path}: parsed by `decode`"),
                });
                let mut expected = whole.clone();
                if let Some(metadata) = expected
                    .as_mut()
                    .and_then(|o| o.get_mut("metadata"))
                    .and_then(Value::as_object_mut)
                    && metadata.remove("managedFields").is_some()
                {
                    checked += 1;
                }
                assert_eq!(lean, expected, "{path}");
            }
        }
        assert!(checked >= 20, "only {checked} objects had managedFields");

        // Not a map, or no metadata: kept as they are.
        for object in [
            r#"[1,"a",{"metadata":{"managedFields":1}}]"#,
            r#"{"spec":{"managedFields":1}}"#,
            "7",
        ] {
            assert_eq!(lean(object), serde_json::from_str::<Value>(object).unwrap());
        }
    }

    #[test]
    fn an_object_before_the_operation_is_kept_raw_without_asking() {
        let request = r#"{"object":{"a":1},"uid":"u","operation":"DELETE","oldObject":null}"#;
        let review = decode_with(
            &body("admission.k8s.io/v1", "AdmissionReview", request),
            &mut |_| panic!("asked without an operation"),
        )
        .unwrap();
        assert_eq!(review.request.operation, Operation::Delete);
        let object = review.request.object.as_ref().map(Embedded::to_value);
        assert_eq!(object.unwrap().unwrap(), serde_json::json!({"a": 1}));
    }

    #[test]
    fn an_object_that_does_not_parse_is_named_when_it_was_parsed_while_decoding() {
        let request = r#"{"uid":"u","operation":"CREATE","object":{"spec":{"n":1e400}}}"#;
        let body = body("admission.k8s.io/v1", "AdmissionReview", request);
        let read = projections_of(&["$.object.spec.n"]);
        for parse in [ObjectParse::Full, ObjectParse::Projected(read.of_kind(""))] {
            let err = decode_with(&body, &mut |_| parse).unwrap_err().to_string();
            assert!(
                err.contains("request.object.spec.n") && err.contains("out of range"),
                "{parse:?}: {err}"
            );
        }
        // Kept raw, the same object decodes: the engine reports it when it
        // parses it.
        assert!(decode_with(&body, &mut |_| ObjectParse::Raw).is_ok());
    }

    /// A request whose object nests `levels` objects (`{"a":{"a":…}}`).
    fn nested_object_request(levels: usize) -> String {
        let object = format!(
            "{}{}",
            r#"{"a":"#.repeat(levels - 1) + "{}",
            "}".repeat(levels - 1)
        );
        format!(r#"{{"uid":"u","operation":"CREATE","object":{object}}}"#)
    }

    #[test]
    fn an_object_is_read_up_to_the_documented_depth() {
        // README, "Limits": serde_json stops at 128 levels counted from the
        // review's top, which leaves the object 125.
        // A path as deep as a rule may write (`plan::MAX_PATH_STEPS`).
        let read = projections_of(&[&format!(
            "$.object{}",
            ".a".repeat(crate::plan::MAX_PATH_STEPS)
        )]);
        for parse in [ObjectParse::Full, ObjectParse::Projected(read.of_kind(""))] {
            let within = body(
                "admission.k8s.io/v1",
                "AdmissionReview",
                &nested_object_request(125),
            );
            assert!(decode_with(&within, &mut |_| parse).is_ok(), "{parse:?}");
            let deeper = body(
                "admission.k8s.io/v1",
                "AdmissionReview",
                &nested_object_request(126),
            );
            let err = decode_with(&deeper, &mut |_| parse)
                .unwrap_err()
                .to_string();
            assert!(err.contains("recursion limit exceeded"), "{parse:?}: {err}");
        }
        // Kept raw (no rule reads the object), any depth decodes.
        let deep = body(
            "admission.k8s.io/v1",
            "AdmissionReview",
            &nested_object_request(5_000),
        );
        assert!(decode_with(&deep, &mut |_| ObjectParse::Raw).is_ok());
    }

    #[test]
    fn a_repeated_field_is_refused() {
        let request = r#"{"uid":"u","operation":"CREATE","uid":"v"}"#;
        let err = decode(&body("admission.k8s.io/v1", "AdmissionReview", request)).unwrap_err();
        let err = err.to_string();
        assert!(err.contains("request: duplicate field `uid`"), "{err}");

        // The envelope's fields too. With two `request`s, the rules chosen
        // for the first (a ConfigMap, as its object was reached) would
        // have judged the second.
        let first = r#"{"uid":"u","operation":"CREATE","kind":{"group":"","version":"v1","kind":"ConfigMap"},"resource":{"group":"","version":"v1","resource":"configmaps"},"object":{}}"#;
        let second = r#"{"uid":"v","operation":"CREATE","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"}}"#;
        for (twice, text) in [
            (
                "request",
                format!(
                    r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{first},"request":{second}}}"#
                ),
            ),
            (
                "apiVersion",
                format!(
                    r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{second}}}"#
                ),
            ),
            (
                "kind",
                format!(
                    r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{second}}}"#
                ),
            ),
        ] {
            for parse in [ObjectParse::Raw, ObjectParse::Full] {
                let err = decode_with(text.as_bytes(), &mut |_| parse)
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(&format!("duplicate field `{twice}`")), "{err}");
            }
        }
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
    fn encodes_every_field_with_escaping_and_the_patch_in_base64() {
        use crate::patch::{Op, Operation, Patch, Token};
        let key = |k: &str| Token::Key(k.into());
        let warnings = vec!["w\u{1}".to_owned()];
        let audit_annotations = BTreeMap::from([("rules-denied".to_owned(), "a/b".to_owned())]);
        let patch = Patch(vec![
            Operation {
                op: Op::Add,
                location: vec![key("metadata"), key("labels"), key("a/b~c")],
                value_json: serde_json::json!({"q": "\"x\""}).to_string().into(),
            },
            Operation {
                op: Op::Replace,
                location: vec![key("spec"), key("n\"q"), Token::Index(12)],
                value_json: "1".into(),
            },
        ]);
        let response = Response {
            allowed: false,
            denial: Some(DenialStatus {
                code: 403,
                reason: "Forbidden",
                message: "said \"no\"\\",
            }),
            warnings: &warnings,
            patch: Some(&patch),
            audit_annotations: &audit_annotations,
        };
        let bytes = encode(ReviewVersion::V1, "u\"1", &response);
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let patch = value["response"]["patch"].as_str().unwrap();
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: serde_json::Value = serde_json::from_slice(&patch).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "add", "path": "/metadata/labels/a~1b~0c", "value": {"q": "\"x\""}},
                {"op": "replace", "path": "/spec/n\"q/12", "value": 1},
            ])
        );
        let mut response = value["response"].clone();
        response.as_object_mut().unwrap().remove("patch");
        assert_eq!(
            response,
            serde_json::json!({
                "uid": "u\"1",
                "allowed": false,
                "status": {"status": "Failure", "code": 403, "reason": "Forbidden", "message": "said \"no\"\\"},
                "warnings": ["w\u{1}"],
                "patchType": "JSONPatch",
                "auditAnnotations": {"rules-denied": "a/b"},
            })
        );
        assert_eq!(value["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(value["kind"], "AdmissionReview");
    }

    #[test]
    fn encodes_in_the_callers_version_without_empty_fields() {
        let response = Response {
            allowed: true,
            denial: None,
            warnings: &[],
            patch: None,
            audit_annotations: &BTreeMap::new(),
        };
        let bytes = encode(ReviewVersion::V1Beta1, "abc", &response);
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                "response": {"uid": "abc", "allowed": true}})
        );
    }
}
