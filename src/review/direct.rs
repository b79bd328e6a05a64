//! Decoding a review straight from its text: the envelope and the request
//! walked with a [`Cursor`]; the request's fields read by hand where they
//! have the shape kube-apiserver writes and by serde_json, from the same
//! place, where they have another; the objects built by hand as far as
//! their projection keeps them; and what no rule reads skipped without
//! building or dispatching on it.
//!
//! serde_json skips a value at about 13 instructions a byte (its
//! `IgnoredAny` goes through the deserializer byte by byte); the cursor
//! finds a string's end eight bytes at a time and keeps no state but a bit
//! per open container, so a review whose objects are mostly unread (the
//! `managedFields`, a Pod's status and tolerations) decodes at about 5
//! instructions a skipped byte. See docs/benchmarks.md.
//!
//! This reading accepts a subset of what [`super::decode_with`]'s serde
//! path accepts and, where it accepts, decodes exactly what that path
//! decodes. Anything else (a syntax error, a repeated field, a type
//! serde_json refuses, read parts nested near serde_json's limit) gives
//! `None`, and the caller decodes the body again through serde_json, which
//! answers with its own error or value. The tests below and the review
//! fuzz target hold the two to the same result.

use serde::Deserialize;
use serde::de::IntoDeserializer;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Decoded, Embedded, Envelope, EnvelopeField, ObjectParse, Operation, Request};
use super::{GroupVersionKind, GroupVersionResource, UserInfo};
use super::{RequestField, objects_parse};
use crate::json::Cursor;
use crate::plan::projection::Projection;

/// Containers serde_json builds inside an object before it refuses the
/// body as too deep is 125 (128 less the envelope, the request and the
/// object itself); this reading stops well before, and a body that nests
/// its read parts deeper is left to serde_json to accept or refuse.
const OBJECT_LEVELS: usize = 100;

/// The envelope of `text` as the serde path's `EnvelopeSeed` decodes it,
/// asking `parse_objects` the same question at the same place; `None` for
/// anything this reading leaves to serde_json.
pub(super) fn envelope<'p>(
    text: &str,
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> Option<Envelope> {
    let mut cursor = Cursor::new(text);
    let mut envelope = Envelope {
        api_version: None,
        kind: None,
        request: None,
    };
    let mut seen = [false; 3];
    if cursor.open(b'{', b'}').ok()? {
        loop {
            let key = cursor.key().ok()?;
            let field = field::<EnvelopeField>(&key)?;
            let slot = match field {
                EnvelopeField::ApiVersion => 0,
                EnvelopeField::Kind => 1,
                EnvelopeField::Request => 2,
                EnvelopeField::Other => {
                    cursor.skip_value().ok()?;
                    if cursor.next_member(b'}').ok()? {
                        continue;
                    }
                    break;
                }
            };
            if std::mem::replace(&mut seen[slot], true) {
                return None; // refused by the serde path, with the field's name
            }
            match field {
                EnvelopeField::ApiVersion => envelope.api_version = optional_text(&mut cursor)?,
                EnvelopeField::Kind => envelope.kind = optional_text(&mut cursor)?,
                _ => envelope.request = optional_request(&mut cursor, parse_objects)?,
            }
            if !cursor.next_member(b'}').ok()? {
                break;
            }
        }
    }
    cursor.skip_whitespace();
    (cursor.at() == text.len()).then_some(envelope)
}

/// A member name as a field of `F`, as serde's derived identifier reads it.
fn field<'k, F: Deserialize<'k>>(key: &'k str) -> Option<F> {
    F::deserialize(IntoDeserializer::<serde::de::value::Error>::into_deserializer(key)).ok()
}

/// The value at the cursor read as `T` by serde_json, which then reports
/// where it ended.
fn typed<'t, T: Deserialize<'t>>(cursor: &mut Cursor<'t>) -> Option<T> {
    let start = cursor.at();
    let rest = cursor.text().get(start..)?;
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<T>();
    let value = stream.next()?.ok()?;
    cursor.seek(start + stream.byte_offset());
    Some(value)
}

/// The value at the cursor read by `read`, or, where `read` does not take
/// it on, by serde_json as `T` from the same place.
fn read_or_typed<'t, T: Deserialize<'t>>(
    cursor: &mut Cursor<'t>,
    read: impl FnOnce(&mut Cursor<'t>) -> Option<T>,
) -> Option<T> {
    let start = cursor.at();
    if let Some(value) = read(cursor) {
        return Some(value);
    }
    cursor.seek(start);
    typed(cursor)
}

/// A string field (`uid`).
fn text(cursor: &mut Cursor<'_>) -> Option<String> {
    read_or_typed(cursor, |c| c.string_value().ok().map(String::from))
}

/// An optional string field (`name`, `namespace`...): a string or `null`.
fn optional_text(cursor: &mut Cursor<'_>) -> Option<Option<String>> {
    read_or_typed(cursor, |c| {
        c.string_value().ok().map(|s| Some(s.into_owned()))
    })
}

/// `operation`, one of serde's names for [`Operation`].
fn operation(cursor: &mut Cursor<'_>) -> Option<Operation> {
    read_or_typed(cursor, |c| field::<Operation>(&c.string_value().ok()?))
}

/// `kind`, `requestKind`: a map of strings.
fn group_version_kind(cursor: &mut Cursor<'_>) -> Option<GroupVersionKind> {
    read_or_typed(cursor, |c| {
        let [group, version, kind] = string_members(c, ["group", "version", "kind"])?;
        Some(GroupVersionKind {
            group: group.unwrap_or_default(),
            version: version.unwrap_or_default(),
            kind: kind.unwrap_or_default(),
        })
    })
}

/// `resource`, `requestResource`: a map of strings.
fn group_version_resource(cursor: &mut Cursor<'_>) -> Option<GroupVersionResource> {
    read_or_typed(cursor, |c| {
        let [group, version, resource] = string_members(c, ["group", "version", "resource"])?;
        Some(GroupVersionResource {
            group: group.unwrap_or_default(),
            version: version.unwrap_or_default(),
            resource: resource.unwrap_or_default(),
        })
    })
}

/// `userInfo` with a `username`, a `uid` and `groups`, as kube-apiserver
/// writes it; `extra`, `null`s and anything else go to serde_json.
fn user_info(cursor: &mut Cursor<'_>) -> Option<UserInfo> {
    read_or_typed(cursor, |c| {
        let mut user = UserInfo::default();
        let mut seen = [false; 3];
        if c.open(b'{', b'}').ok()? {
            loop {
                let key = c.key().ok()?;
                let slot = ["username", "uid", "groups"].iter().position(|n| *n == key);
                match slot {
                    Some(slot) if !std::mem::replace(&mut seen[slot], true) => match slot {
                        0 => user.username = c.string_value().ok()?.into_owned(),
                        1 => user.uid = Some(c.string_value().ok()?.into_owned()),
                        _ => {
                            if c.open(b'[', b']').ok()? {
                                loop {
                                    user.groups.push(c.string_value().ok()?.into_owned());
                                    if !c.next_member(b']').ok()? {
                                        break;
                                    }
                                }
                            }
                        }
                    },
                    // Repeated (refused by serde), or `extra` or another field.
                    _ => return None,
                }
                if !c.next_member(b'}').ok()? {
                    break;
                }
            }
        }
        Some(user)
    })
}

/// A map whose members named in `names` are strings, each at most once
/// (serde's derived structs refuse a repeated field), its other members
/// skipped as serde's derived structs skip them.
fn string_members<const N: usize>(
    cursor: &mut Cursor<'_>,
    names: [&str; N],
) -> Option<[Option<String>; N]> {
    let mut out: [Option<String>; N] = std::array::from_fn(|_| None);
    if cursor.open(b'{', b'}').ok()? {
        loop {
            let key = cursor.key().ok()?;
            match names.iter().position(|name| *name == key) {
                Some(slot) => {
                    let value = cursor.string_value().ok()?.into_owned();
                    if out.get_mut(slot)?.replace(value).is_some() {
                        return None;
                    }
                }
                None => cursor.skip_value().ok()?,
            }
            if !cursor.next_member(b'}').ok()? {
                break;
            }
        }
    }
    Some(out)
}

/// `request`, or `null`.
fn optional_request<'p>(
    cursor: &mut Cursor<'_>,
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> Option<Option<Decoded>> {
    cursor.skip_whitespace();
    if cursor.peek() == Some(b'n') {
        cursor.literal(b"null").ok()?;
        return Some(None);
    }
    request(cursor, parse_objects).map(Some)
}

/// The request as `RequestSeed` decodes it: the same fields, the same
/// refusals of a repeated one, and `parse_objects` asked once, on reaching
/// the first object, with the request as read so far.
fn request<'p>(
    cursor: &mut Cursor<'_>,
    parse_objects: &mut dyn FnMut(&Request) -> ObjectParse<'p>,
) -> Option<Decoded> {
    let mut request = Request::new(String::new(), Operation::Create);
    let mut seen = 0u32;
    let mut parse: Option<ObjectParse> = None;
    let mut asked_early = false;
    if cursor.open(b'{', b'}').ok()? {
        loop {
            let key = cursor.key().ok()?;
            let field = field::<RequestField>(&key)?;
            asked_early |= parse.is_some() && field.selects();
            if field != RequestField::Other {
                let bit = 1 << (field as u32);
                if seen & bit != 0 {
                    return None;
                }
                seen |= bit;
            }
            match field {
                RequestField::Uid => request.uid = text(cursor)?,
                RequestField::Kind => request.kind = group_version_kind(cursor)?,
                RequestField::Resource => request.resource = group_version_resource(cursor)?,
                RequestField::SubResource => request.sub_resource = optional_text(cursor)?,
                RequestField::RequestKind => {
                    request.request_kind = Some(group_version_kind(cursor)?)
                }
                RequestField::RequestResource => {
                    request.request_resource = Some(group_version_resource(cursor)?)
                }
                RequestField::RequestSubResource => {
                    request.request_sub_resource = optional_text(cursor)?
                }
                RequestField::Name => request.name = optional_text(cursor)?,
                RequestField::Namespace => request.namespace = optional_text(cursor)?,
                RequestField::Operation => request.operation = operation(cursor)?,
                RequestField::UserInfo => request.user_info = user_info(cursor)?,
                RequestField::Object | RequestField::OldObject => {
                    let parse = *parse
                        .get_or_insert_with(|| objects_parse(&request, seen, &mut *parse_objects));
                    let value = match parse {
                        ObjectParse::Raw => {
                            typed::<Option<Box<RawValue>>>(cursor)?.map(Embedded::Raw)
                        }
                        ObjectParse::Full => parsed(cursor.value(OBJECT_LEVELS).ok()?),
                        ObjectParse::Projected(projections) => {
                            let projection = if field == RequestField::Object {
                                &projections.object
                            } else {
                                &projections.old_object
                            };
                            parsed(projected(cursor, projection, OBJECT_LEVELS)?)
                        }
                    };
                    if field == RequestField::Object {
                        request.object = value;
                    } else {
                        request.old_object = value;
                    }
                }
                RequestField::DryRun => request.dry_run = typed(cursor)?,
                RequestField::Options => request.options = typed(cursor)?,
                RequestField::Other => cursor.skip_value().ok()?,
            }
            if !cursor.next_member(b'}').ok()? {
                break;
            }
        }
    }
    for required in [RequestField::Uid, RequestField::Operation] {
        if seen & (1 << (required as u32)) == 0 {
            return None;
        }
    }
    Some(Decoded {
        request,
        asked_early,
    })
}

/// An object as the request holds it: absent for `null`.
fn parsed(value: Value) -> Option<Embedded> {
    match value {
        Value::Null => None,
        value => Some(Embedded::Parsed(value)),
    }
}

/// The value at the cursor as far as `projection` keeps it, as the serde
/// path's `ProjectedSeed` builds it: a map with only the members it names,
/// a list with each element projected (skipped ones as nulls), a scalar as
/// it is; at most `levels` nested containers.
fn projected(cursor: &mut Cursor<'_>, projection: &Projection, levels: usize) -> Option<Value> {
    if projection.is_whole() {
        return cursor.value(levels).ok();
    }
    cursor.skip_whitespace();
    match cursor.peek()? {
        b'{' => {
            let inner = levels.checked_sub(1)?;
            let mut out = Map::new();
            if cursor.open(b'{', b'}').ok()? {
                loop {
                    let key = cursor.key().ok()?;
                    match projection.member(&key) {
                        None => cursor.skip_value().ok()?,
                        Some(member) => {
                            let value = projected(cursor, member, inner)?;
                            out.insert(key.into_owned(), value);
                        }
                    }
                    if !cursor.next_member(b'}').ok()? {
                        break;
                    }
                }
            }
            Some(Value::Object(out))
        }
        b'[' => {
            let inner = levels.checked_sub(1)?;
            let element = projection.element();
            let mut out = Vec::new();
            if cursor.open(b'[', b']').ok()? {
                loop {
                    if let Projection::Nothing = element {
                        cursor.skip_value().ok()?;
                        out.push(Value::Null);
                    } else {
                        out.push(projected(cursor, element, inner)?);
                    }
                    if !cursor.next_member(b']').ok()? {
                        break;
                    }
                }
            }
            Some(Value::Array(out))
        }
        _ => cursor.value(levels).ok(),
    }
}

#[cfg(test)]
mod tests {
    //! The direct reading against the serde path: wherever it decodes, it
    //! decodes the same; real reviews take it; whatever it leaves to
    //! serde_json, serde_json answers as before.
    use super::*;
    use crate::plan::{Mode, Plan};
    use crate::review::{decode_with, decode_with_serde_json};
    use proptest::prelude::*;

    fn bundled_plan() -> Plan {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"));
        crate::plan::compile(&crate::rules::load_dir(dir).expect("rules"))
            .unwrap_or_else(|d| panic!("{d}"))
    }

    fn fixtures() -> Vec<(String, String)> {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/admission-reviews"
        );
        let mut bodies: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("fixtures")
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                (path.extension()? == "json").then(|| {
                    let text = std::fs::read_to_string(&path).expect("fixture");
                    (path.display().to_string(), text)
                })
            })
            .collect();
        bodies.sort();
        assert!(bodies.len() >= 20, "{dir}: {} fixtures", bodies.len());
        bodies
    }

    /// The ways the server asks for objects: raw, whole, and as each mode's
    /// rules read them.
    type Asking<'p> = Box<dyn Fn(&Request) -> ObjectParse<'p> + 'p>;

    fn asks(plan: &Plan) -> Vec<(&'static str, Asking<'_>)> {
        vec![
            ("raw", Box::new(|_: &Request| ObjectParse::Raw)),
            ("full", Box::new(|_: &Request| ObjectParse::Full)),
            (
                "mutate",
                Box::new(|r: &Request| {
                    ObjectParse::Projected(plan.projections(Mode::Mutate, &r.kind.kind))
                }),
            ),
            (
                "validate",
                Box::new(|r: &Request| {
                    ObjectParse::Projected(plan.projections(Mode::Validate, &r.kind.kind))
                }),
            ),
        ]
    }

    /// Both decoders' results, written out in full.
    fn both<'p>(body: &str, ask: &dyn Fn(&Request) -> ObjectParse<'p>) -> (String, String) {
        let mut asked_direct = 0;
        let direct = decode_with(body.as_bytes(), &mut |r| {
            asked_direct += 1;
            ask(r)
        });
        let mut asked_serde = 0;
        let serde = decode_with_serde_json(body.as_bytes(), &mut |r| {
            asked_serde += 1;
            ask(r)
        });
        // Asked as often (a fallback asks again, so only where it decodes).
        if direct_reading(body, ask) {
            assert_eq!(asked_direct, asked_serde, "{body}");
        }
        (format!("{direct:?}"), format!("{serde:?}"))
    }

    /// True when the direct reading decodes `body` itself.
    fn direct_reading<'p>(body: &str, ask: &dyn Fn(&Request) -> ObjectParse<'p>) -> bool {
        envelope(body, &mut |r| ask(r)).is_some()
    }

    #[test]
    fn every_recorded_review_is_read_directly_and_as_serde_json_reads_it() {
        let plan = bundled_plan();
        for (path, body) in fixtures() {
            for (how, ask) in asks(&plan) {
                assert!(
                    direct_reading(&body, &*ask),
                    "{path} ({how}) left to serde_json"
                );
                let compact = serde_json::to_string(
                    &serde_json::from_str::<Value>(&body).expect("fixture is JSON"),
                )
                .expect("JSON");
                for text in [&body, &compact] {
                    let (direct, serde) = both(text, &*ask);
                    assert_eq!(direct, serde, "{path} ({how})");
                    assert!(direct.starts_with("Ok("), "{path} ({how}): {direct}");
                }
            }
        }
    }

    #[test]
    fn what_the_direct_reading_leaves_to_serde_json_is_answered_by_it() {
        let plan = bundled_plan();
        let pod = |object: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"operation":"CREATE","userInfo":{{"username":"a"}},"object":{object}}}}}"#
            )
        };
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let cases = [
            // Repeated fields, at each level.
            r#"{"kind":"AdmissionReview","kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":null}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","uid":"b","operation":"CREATE"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","x":1,"x":2}}"#.to_owned(),
            // Escaped names, which serde's identifiers decode.
            r#"{"api\u0056ersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"u\u0069d":"a","operation":"CREATE"}}"#.to_owned(),
            // Missing and mistyped fields; no request; a request that is not a map.
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7,"operation":"CREATE"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"MAKE"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[]}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":nul}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}  "#.to_owned(),
            r#"[]"#.to_owned(),
            r#"  "#.to_owned(),
            // Typed fields in every shape serde accepts or refuses.
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","kind":["","v1","Pod"],"resource":{"resource":"pods","x":[{}],"group":""}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","kind":{"kind":"Pod","kind":"Pod"}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","kind":{"gr\u006fup":"apps","kind":null}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","kind":null}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","requestKind":null,"requestResource":null,"name":null,"namespace":"n\u0073","subResource":null}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"create"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":null,"operation":"CREATE"}}"#.to_owned(),
            r#"{"apiVersion":null,"kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","userInfo":{"username":"u","uid":null,"groups":["g","h"],"extra":{"k":["v"]}}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","userInfo":{"username":"u","username":"v"}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","userInfo":{"groups":null}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","userInfo":{"groups":[],"other":1}}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","userInfo":{"groups":["a",1]}}}"#.to_owned(),
            // Objects before the operation, and before the kind.
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","object":{"metadata":{"name":"x"}},"operation":"CREATE"}}"#.to_owned(),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a","operation":"CREATE","object":{"metadata":{"name":"x","managedFields":[1]}},"kind":{"kind":"Pod"}}}"#.to_owned(),
            // Trailing text, and text cut short.
            format!("{} x", pod("{}")),
            pod("{}").trim_end_matches('}').to_owned(),
            // Objects: null, not a map, with escapes and lone surrogates read and skipped.
            pod("null"),
            pod("[1,2]"),
            pod(r#"{"metadata":{"name":"a\"b","la\u0062els":{"k\n":"v"}}}"#),
            pod(r#"{"metadata":{"name":"\ud800"}}"#),
            pod(r#"{"metadata":{"managedFields":["\ud800"]}}"#),
            pod(r#"{"status":{"x":"\ud800\udc00"}}"#),
            // Numbers: out of range read and skipped, malformed skipped.
            pod(r#"{"spec":{"priority":1e400}}"#),
            pod(r#"{"status":{"x":1e400}}"#),
            pod(r#"{"status":{"x":01}}"#),
            pod(r#"{"status":{"x":-}}"#),
            pod(r#"{"spec":{"containers":[{"name":"a","resources":{"limits":{"cpu":1.5e3}}}]}}"#),
            // Broken JSON in a skipped part; a control character in a string.
            pod(r#"{"status":{"x":[1,}}}"#),
            pod(r#"{"status":{"x":{"a" 1}}}"#),
            pod("{\"status\":\"a\u{1}b\"}"),
            // Nesting: skipped parts as deep as they like; read parts near
            // and past serde_json's limit.
            pod(&format!(r#"{{"status":{}}}"#, deep(100_000))),
            pod(&format!(r#"{{"metadata":{{"labels":{{"a":{}}}}}}}"#, deep(90))),
            pod(&format!(r#"{{"metadata":{{"labels":{{"a":{}}}}}}}"#, deep(120))),
            pod(&format!(r#"{{"metadata":{{"labels":{{"a":{}}}}}}}"#, deep(130))),
            pod(&format!(r#"{{"spec":{{"containers":[{}]}}}}"#, deep(122))),
            // Whitespace of every kind, and none.
            pod(" {\t\"metadata\" :\r\n{ \"name\" : \"a\" , \"labels\":{ } } , \"status\" : [ ] } "),
        ];
        let mut direct_count = 0;
        for body in &cases {
            for (how, ask) in asks(&plan) {
                direct_count += usize::from(direct_reading(body, &*ask));
                let (direct, serde) = both(body, &*ask);
                assert_eq!(direct, serde, "{how}: {body:.300}");
            }
        }
        // Most of these are read directly (the rest are refusals).
        assert!(direct_count >= 60, "{direct_count} read directly");
    }

    #[test]
    fn a_skipped_part_is_skipped_without_recursion() {
        // 1,000,000 levels: recursion this deep would overflow the stack.
        let n = 1_000_000;
        let text = format!("{}1{}", "[{\"a\":".repeat(n), "}]".repeat(n));
        let mut cursor = Cursor::new(&text);
        assert_eq!(cursor.skip_value(), Ok(()));
        assert_eq!(cursor.at(), text.len());
        let broken = format!("{}1{}", "[{\"a\":".repeat(n), "]}".repeat(n));
        assert!(Cursor::new(&broken).skip_value().is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any value put anywhere in a Pod's object, written compact or
        /// pretty: both decoders give the same review.
        #[test]
        fn any_object_decodes_as_serde_json_decodes_it(
            value in crate::json::tests::json_value(),
            place in 0usize..6,
            pretty in any::<bool>(),
        ) {
            let plan = bundled_plan();
            let mut review: Value = serde_json::from_str(
                &fixtures().into_iter().find(|(p, _)| p.ends_with("/create-pod.json")).expect("fixture").1,
            ).expect("JSON");
            let object = &mut review["request"]["object"];
            match place {
                0 => object["metadata"]["labels"]["x"] = value,
                1 => object["metadata"]["managedFields"] = value,
                2 => object["spec"]["containers"][0]["resources"] = value,
                3 => object["spec"]["tolerations"] = value,
                4 => object["status"] = value,
                _ => *object = value,
            }
            let body = if pretty {
                serde_json::to_string_pretty(&review)
            } else {
                serde_json::to_string(&review)
            }.expect("JSON");
            for (how, ask) in asks(&plan) {
                prop_assert!(direct_reading(&body, &*ask), "{} left to serde_json", how);
                let (direct, serde) = both(&body, &*ask);
                prop_assert_eq!(direct, serde, "{}", how);
            }
        }

        /// Any cut of a recorded review is decoded (or refused) the same.
        #[test]
        fn any_cut_of_a_review_decodes_as_serde_json_decodes_it(cut in 0usize..3335) {
            let plan = bundled_plan();
            let body = fixtures().into_iter().find(|(p, _)| p.ends_with("/create-pod.json")).expect("fixture").1;
            let text = body.get(..cut.min(body.len())).unwrap_or("");
            for (how, ask) in asks(&plan) {
                let (direct, serde) = both(text, &*ask);
                prop_assert_eq!(direct, serde, "{}", how);
            }
        }
    }
}
